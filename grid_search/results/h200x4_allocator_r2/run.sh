#!/bin/bash
# 4 H200s: the GPT-2 1.6B training configurations of ../gpu4_allocator (every D*T*P = 4,
# K <= 2, predicted within 5% of the card's capacity), picked and measured again on the
# backend that copies transposes, each uncapped in a session of its own.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run.log
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/nvidia-smi.txt"
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "$mem" -lt 100000 ]; then echo "not H200s: the batches are sized for 139.8 GiB"; exit 3; fi
s=$SECONDS
timeout -s INT -k 30 ${1:-380} python3 -m grid_search.study measure --model gpt2-1.6b-train \
    --dtype Float16 --batch-sizes 128 132 160 168 176 184 192 208 216 --max-devices 4 \
    --min-devices 4 --max-microbatches 2 --memory-check --margin 0.05 --max-configs 12 \
    --hardware h200-sxm --steps 2 --warmup 1 -o "$OUT/gpt2_1.6b_train_capacity.csv" >> "$L" 2>&1
echo "### measure rc $? after $((SECONDS - s)) s" >> "$L"
grep -v "^\s*File\|^    " "$L" | grep "###\|measured D\|memory check" | cut -c1-200 | tail -20
