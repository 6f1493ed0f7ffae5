#!/bin/bash
# One H100 (nvidia-h100-x1): the GPT-2 configurations of ../h100x1_allocator/ (one GPU,
# training, float16, Adam, batch sizes at the card's capacity: 350M at 44 / 45 / 46, 1.6B at
# 28 / 29 / 30) measured again after the backend made transposes contiguous (commit 4ad483f):
# predicted fits against real out-of-memory runs on the new backend. Uncapped; 2 timed steps
# after one warm-up. Run from the project root, $OUT set.
set -u
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/nvidia-smi.txt"
echo "### project commit $(cat COMMIT)" > "$OUT/run.log"
study() {  # model batches...
    m=$1; shift
    s=$SECONDS
    timeout -s INT -k 30 120 python3 -m grid_search.study measure --model "$m" \
        --dtype Float16 --batch-sizes "$@" --max-devices 1 --max-microbatches 1 \
        --hardware h100-sxm --steps 2 --warmup 1 -o "$OUT/${m}_capacity.csv" >> "$OUT/run.log" 2>&1
    echo "### $m rc $? after $((SECONDS - s)) s" >> "$OUT/run.log"
}
study gpt2-350m-train 44 45 46
study gpt2-1.6b-train 28 29 30
grep "###\|measured" "$OUT/run.log"
