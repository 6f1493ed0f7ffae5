#!/bin/bash
# Call C (same machine as B): the device-time calibration of the compute kernels on one GPU
# (as ../graph_heldout_4gpu/run_c.sh did on an H200), measured only; fitted off the device.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_c.log
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
s=$SECONDS
timeout -s INT -k 20 560 python3 -m calibration -o "$OUT/h100-sxm-graph.json" --name h100-sxm-graph \
    --base h100-sxm --device-time --no-comm --devices 1 --measure-only >> "$L" 2>&1
echo "### measure rc $? after $((SECONDS - s)) s" >> "$L"
ls -la "$OUT" >> "$L"
uptime >> "$L"
tail -30 "$L"
