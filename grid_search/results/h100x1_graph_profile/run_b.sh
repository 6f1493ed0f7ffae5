#!/bin/bash
# Call B (1 H100, after call A): the memory-bound training families in bfloat16, timed by
# their device time alone, to pool with call A's measurements. Run from the project root.
set -u
L=$OUT/run_b.log
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L | grep -q H100 || { echo "not an H100" | tee -a "$L"; exit 3; }
nvidia-smi -L >> "$L"
s=$SECONDS
timeout -s INT -k 20 ${1:-230} python3 -m calibration -o "$OUT/h100-sxm-graph-bf16.json" \
    --name h100-sxm-graph-bf16 --device-time --no-comm --devices 1 --measure-only \
    --dtypes BFloat16 --families adam layernorm_grad softmax_grad cross_entropy \
    cross_entropy_grad reduce scatter_add softmax layernorm gelu copy >> "$L" 2>&1
echo "### measure rc $? after $((SECONDS - s)) s" >> "$L"
tail -8 "$L"
