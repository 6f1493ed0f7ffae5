#!/bin/bash
# One H100 (asked for as nvidia-h100-x1, which gives only an H100): what a one-rank run
# holds outside the allocator, then single-GPU configurations of GPT-2 350M and 1.6B and
# MLP 17B training predicted within 6% of the card's capacity on either side, uncapped.
set -u
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/nvidia-smi.txt"
python3 -m calibration.memory_overhead --gpus 1 --groups 0 -o "$OUT/overhead_1gpu.json" 2>&1 \
    | grep -v "Warning\|warn" > "$OUT/overhead.log"
cat "$OUT/overhead.log"
study() {  # model batches...
    m=$1; shift
    timeout -s INT -k 30 170 python3 -m grid_search.study measure --model "$m" \
        --dtype Float16 --batch-sizes "$@" --max-devices 1 --max-microbatches 1 \
        --memory-check --margin 0.06 --max-configs 6 --hardware h100-sxm \
        --steps 2 --warmup 1 -o "$OUT/${m}_capacity.csv" > "$OUT/measure_$m.log" 2>&1
    echo "$m measure rc $?"
    tail -8 "$OUT/measure_$m.log"
}
study gpt2-350m-train 42 44 46
study gpt2-1.6b-train 26 28 30
study mlp-17b 10240 11264 12288
