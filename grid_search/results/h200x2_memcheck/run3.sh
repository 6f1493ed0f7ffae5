#!/bin/bash
# Two H200s: GPT-2 350M training configurations predicted near the H200's own capacity
# (h200-sxm), run uncapped; the workers now on expandable segments (the default since this commit).
set -u
timeout -s INT -k 30 480 python3 -m grid_search.study measure --model gpt2-350m-train \
    --dtype Float16 --batch-sizes 78 81 84 130 136 140 148 156 162 168 --max-devices 2 \
    --max-microbatches 2 --memory-check --margin 0.05 --max-configs 14 --hardware h200-sxm \
    --steps 3 --warmup 1 -o "$OUT/gpt2_350m_train_capacity.csv" > "$OUT/measure.log" 2>&1
echo "measure rc $?"
tail -20 "$OUT/measure.log"
