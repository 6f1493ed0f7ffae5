#!/bin/bash
# 1 GPU (1 x H200 here). Elementwise ops on operands of different memory orders
# (order_probe.py), float32 and bfloat16, device time; then DeBERTa-v2's one-GPU step
# (v3-base sizes, dynamo export; ../norms_views/, opened) at 8 x 512 traced per op by
# the allocator (calibration.memory_trace). Run from the project root, $OUT set, COMMIT
# holding the commit.
set -u
L=$OUT/run_a.log
echo "### project commit $(cat COMMIT)" > "$L"
nvidia-smi -L >> "$L"
s=$SECONDS
timeout 200 python3 grid_search/results/elementwise_order/order_probe.py \
  > $OUT/order_probe.txt 2>> "$L"
echo "### order_probe rc $? after $((SECONDS - s)) s" >> "$L"
S=/tmp/nv; mkdir -p $S
PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 150 python3 grid_search/results/norms_views/export.py \
  deberta_dynamo $S/deberta.onnx >> "$L" 2>&1
echo "### export after $((SECONDS - s)) s" >> "$L"
timeout 180 torchrun --nproc_per_node 1 -m calibration.memory_trace measure \
  --model $S/deberta.onnx --dim batch=8 --dim seq=512 --train --loss mse --optimizer adam \
  --batch-size 8 --config 1,1,1,1 --backend nccl -o $OUT/deberta.gpu.b8.csv >> "$L" 2>&1
echo "### memory_trace rc $? after $((SECONDS - s)) s" >> "$L"
xz -9 $OUT/deberta.gpu.b8.csv
grep "###\|rror" "$L" | tail -8; cat $OUT/order_probe.txt
