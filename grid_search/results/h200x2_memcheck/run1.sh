#!/bin/bash
# Two GPUs (asked for as H100s; two H200s came): what the card holds outside the allocator (context, cuBLAS, NCCL), then GPT-2
# 350M training configurations predicted near the card's own capacity, run uncapped.
set -u
nvidia-smi > "$OUT/nvidia-smi.txt"
python3 -m calibration.memory_overhead --gpus 2 --groups 2 -o "$OUT/overhead.json" \
    > "$OUT/overhead.log" 2>&1
cat "$OUT/overhead.log"
timeout -s INT -k 30 420 python3 -m grid_search.study measure --model gpt2-350m-train \
    --dtype Float16 --batch-sizes 44 46 72 76 80 84 88 92 --max-devices 2 \
    --max-microbatches 2 --memory-check --margin 0.06 --max-configs 14 --hardware h100-sxm \
    --steps 3 --warmup 1 -o "$OUT/gpt2_350m_train_capacity.csv" > "$OUT/measure.log" 2>&1
echo "measure rc $?"
tail -20 "$OUT/measure.log"
