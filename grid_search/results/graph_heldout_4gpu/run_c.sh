#!/bin/bash
# Call C (1 GPU): the compute kernels of this card timed by their device time alone
# (`--device-time`, the GPU held while the host enqueues them, as a replayed CUDA graph runs
# them), collectives skipped (the 4-GPU profile h200-sxm keeps its links and collective
# fits: see calibration/merge.py). Measurements are written first (--measure-only), so that
# a run stopped by the time limit still leaves the CSV; the fit runs after.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_c.log
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
s=$SECONDS
timeout -s INT -k 20 540 python3 -m calibration -o "$OUT/h200-sxm-graph.json" --name h200-sxm-graph \
    --base h200-sxm --device-time --no-comm --devices 1 --measure-only >> "$L" 2>&1
echo "### measure rc $? after $((SECONDS - s)) s" >> "$L"
ls -la "$OUT" >> "$L"
uptime >> "$L"
tail -30 "$L"
