#!/usr/bin/env bash
# Training steps on one GPU, predicted vs measured (issue 15), and the calibration
# measurements they are predicted with. Run from the repository root on a machine with one
# H100 (the device tool: lark and ml_dtypes wheels installed first), OUT an empty folder:
#
#     bash grid_search/results/h100x1/train_steps.sh
#
# Writes into $OUT: gpt2.json and resnet50.json (bench_grad rows: measured and simulated on
# the profile of the time), bench.log, trace_gpt2.json.gz / trace_resnet50.json.gz (one
# profiled step each, every op marked; `distir explain`), h100-sxm.measurements.csv and
# calibrate.log (`python -m calibration --measure-only`: every family, the training ones
# included), nvidia-smi.txt.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
python3 benchmarks/bench_grad.py --model gpt2 --batch 8 4 --eager --no-checkpoint \
    --profile "$OUT/prof_gpt2" --json "$OUT/gpt2.json" 2>&1 | tee "$OUT/bench.log"
python3 benchmarks/bench_grad.py --model resnet50 --batch 32 64 128 \
    --profile "$OUT/prof_resnet50" --json "$OUT/resnet50.json" 2>&1 | tee -a "$OUT/bench.log"
for m in gpt2 resnet50; do
    if [ -f "$OUT/prof_$m/rank0.json" ]; then
        gzip -c "$OUT/prof_$m/rank0.json" > "$OUT/trace_$m.json.gz"
    fi
    rm -rf "$OUT/prof_$m"
done
left=$(( ${BUDGET_S:-570} - SECONDS )); [ "$left" -lt 60 ] && left=60
echo "benchmarks took ${SECONDS}s; calibrating with ${left}s left" >&2
timeout "$left" python3 -m calibration -o "$OUT/h100-sxm.json" \
    --base h100-sxm-datasheet --measure-only 2> "$OUT/calibrate.log"
echo "calibration exit $?"
