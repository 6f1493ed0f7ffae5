#!/bin/bash
# Two H200s, uncapped (the card's own 139.8 GiB): configurations predicted within 5% of
# the capacity, on both sides, run until some truly run out of memory.
# 1. GPT-2 1.6B training, a model the allocator model (distir.analysis.allocator) was not
#    built on; 2. the GPT-2 350M data-parallel rows of the earlier study again (their
#    program changed since it ran: one replica's functions).
set -u
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/nvidia-smi.txt"
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "$mem" -lt 100000 ]; then echo "not an H200 pair: the batches are sized for 139.8 GiB"; exit 3; fi
timeout -s INT -k 30 420 python3 -m grid_search.study measure --model gpt2-1.6b-train \
    --dtype Float16 --batch-sizes 52 54 84 88 92 96 104 108 --max-devices 2 \
    --max-microbatches 2 --memory-check --margin 0.05 --max-configs 12 --hardware h200-sxm \
    --steps 2 --warmup 1 -o "$OUT/gpt2_1.6b_train_capacity.csv" > "$OUT/measure_1.6b.log" 2>&1
echo "1.6B measure rc $?"
tail -16 "$OUT/measure_1.6b.log"
timeout -s INT -k 30 150 python3 -m grid_search.study measure --model gpt2-350m-train \
    --dtype Float16 --batch-sizes 156 162 168 --max-devices 2 --max-microbatches 2 \
    --configs 2,1,1,1 --hardware h200-sxm --steps 2 --warmup 1 \
    -o "$OUT/gpt2_350m_train_d2.csv" > "$OUT/measure_350m_d2.log" 2>&1
echo "350M D2 measure rc $?"
tail -6 "$OUT/measure_350m_d2.log"
