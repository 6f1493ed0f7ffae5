#!/bin/bash
# Two H200s (asked for H100s twice; H200s came): MLP 17B training (float16), held out from
# the allocator model, configurations predicted within 5% of the card's capacity, uncapped.
set -u
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/nvidia-smi-mlp.txt"
timeout -s INT -k 30 420 python3 -m grid_search.study measure --model mlp-17b \
    --dtype Float16 --batch-sizes 24576 26624 28672 36864 40960 53248 57344 61440 \
    --max-devices 2 --max-microbatches 2 --memory-check --margin 0.05 --max-configs 12 \
    --hardware h200-sxm --steps 2 --warmup 1 -o "$OUT/mlp_17b_capacity.csv" \
    > "$OUT/measure_mlp17b.log" 2>&1
echo "mlp-17b measure rc $?"
tail -16 "$OUT/measure_mlp17b.log"
