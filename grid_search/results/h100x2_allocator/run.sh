#!/bin/bash
# Two H100s: what the card holds outside the allocator (context, cuBLAS, NCCL), then GPT-2
# 350M and 1.6B training configurations predicted within 6% of the card's own capacity
# (the committed h100-sxm profile, which has no reserved_bytes yet), run uncapped.
set -u
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/nvidia-smi.txt"
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "$mem" -gt 100000 ]; then echo "not an H100 pair: the batches are sized for 80 GB"; exit 3; fi
python3 -m calibration.memory_overhead --gpus 2 --groups 2 -o "$OUT/overhead.json" \
    > "$OUT/overhead.log" 2>&1
cat "$OUT/overhead.log"
study() {  # model batches... (output name from the model)
    m=$1; shift
    timeout -s INT -k 30 240 python3 -m grid_search.study measure --model "$m" \
        --dtype Float16 --batch-sizes "$@" --max-devices 2 --max-microbatches 2 \
        --memory-check --margin 0.06 --max-configs 14 --hardware h100-sxm \
        --steps 2 --warmup 1 -o "$OUT/${m}_capacity.csv" > "$OUT/measure_$m.log" 2>&1
    echo "$m measure rc $?"
    tail -16 "$OUT/measure_$m.log"
}
study gpt2-350m-train 42 44 46 72 76 80 84 88 92
study gpt2-1.6b-train 26 28 30 48 52 56 60
