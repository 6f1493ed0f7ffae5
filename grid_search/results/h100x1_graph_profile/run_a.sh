#!/bin/bash
# Call A (1 H100): the compute kernels of this card timed by their device time alone
# (`--device-time`, as a replayed CUDA graph runs them), collectives skipped (the H100
# profile h100-sxm keeps its links and collective fits: calibration/merge.py). Measured
# only (the fit runs off the device); a run stopped by its time limit still leaves the CSV.
# Run from the project root, $OUT set.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_a.log
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L | grep -q H100 || { echo "not an H100" | tee -a "$L"; exit 3; }
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
s=$SECONDS
timeout -s INT -k 20 ${1:-540} python3 -m calibration -o "$OUT/h100-sxm-graph-compute.json" \
    --name h100-sxm-graph --base h100-sxm --device-time --no-comm --devices 1 --measure-only >> "$L" 2>&1
echo "### measure rc $? after $((SECONDS - s)) s" >> "$L"
ls -la "$OUT" >> "$L"
tail -12 "$L"
