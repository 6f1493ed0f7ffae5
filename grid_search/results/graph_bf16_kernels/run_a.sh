#!/bin/bash
# Call A (1 H200): the memory-bound kernel families a transformer's training step uses,
# in bfloat16, timed by their device time alone (as ../graph_heldout_4gpu/ call C timed
# every family, in float32 and float16 only): measured only, fitted off the device together
# with call C's measurements. Run from the project root, $OUT set.
set -u
L=$OUT/run_a.log
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"
s=$SECONDS
timeout -s INT -k 20 230 python3 -m calibration -o "$OUT/h200-sxm-graph-bf16.json" \
    --name h200-sxm-graph-bf16 --device-time --no-comm --devices 1 --measure-only \
    --dtypes BFloat16 --families adam layernorm_grad softmax_grad cross_entropy \
    cross_entropy_grad reduce scatter_add softmax layernorm gelu copy >> "$L" 2>&1
echo "### measure rc $? after $((SECONDS - s)) s" >> "$L"
tail -20 "$L"
