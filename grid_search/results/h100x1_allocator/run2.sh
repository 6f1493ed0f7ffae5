#!/bin/bash
# One H100: the batch sizes between those of run.sh that ran and ran out (the finest step
# the models allow), single-GPU configurations, uncapped, 2 timed steps after one warm-up.
set -u
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/nvidia-smi2.txt"
study() {  # model batches...
    m=$1; shift
    timeout -s INT -k 30 170 python3 -m grid_search.study measure --model "$m" \
        --dtype Float16 --batch-sizes "$@" --max-devices 1 --max-microbatches 1 \
        --memory-check --margin 0.06 --max-configs 6 --hardware h100-sxm \
        --steps 2 --warmup 1 -o "$OUT/${m}_fine.csv" > "$OUT/measure_fine_$m.log" 2>&1
    echo "$m measure rc $?"
    tail -5 "$OUT/measure_fine_$m.log"
}
study gpt2-350m-train 45
study gpt2-1.6b-train 29
study mlp-17b 11776 12032
