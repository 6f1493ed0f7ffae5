#!/bin/bash
# Four GPUs: what a rank holds outside the allocator with 1, 2 and 4 ranks and several
# communicators (calibration.memory_overhead), then GPT-2 1.6B training, every D/T/P/K with
# D*T*P = 4, K <= 2, predicted within 5% of the card's capacity on either side, each run
# uncapped in a session of its own (--memory-check), 2 timed steps after one warm-up.
set -u
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/nvidia-smi.txt"
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "$mem" -gt 100000 ]; then hw=h200-sxm; batches="128 132 160 168 176 184 192 208 216"
else hw=h100-sxm; batches="72 76 96 104 112 120"; fi
echo "profile $hw" | tee "$OUT/overhead.log"
for g in "1 0" "2 1" "4 3"; do
    set -- $g
    python3 -m calibration.memory_overhead --gpus "$1" --groups "$2" \
        -o "$OUT/overhead_$1gpu.json" 2>&1 | grep -v "Warning\|warn" >> "$OUT/overhead.log"
done
cat "$OUT/overhead.log"
timeout -s INT -k 30 420 python3 -m grid_search.study measure --model gpt2-1.6b-train \
    --dtype Float16 --batch-sizes $batches --max-devices 4 --min-devices 4 \
    --max-microbatches 2 --memory-check --margin 0.05 --max-configs 12 --hardware "$hw" \
    --steps 2 --warmup 1 -o "$OUT/gpt2_1.6b_train_capacity.csv" > "$OUT/measure.log" 2>&1
echo "measure rc $?"
tail -16 "$OUT/measure.log"
