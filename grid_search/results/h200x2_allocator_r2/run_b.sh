#!/bin/bash
# Two H200s, uncapped (the card's own 139.8 GiB), on the backend that copies batch-axis and
# unaligned transposes (commit 4ad483f and later): the GPT-2 configurations of
# ../h200x2_allocator (1.6B) and ../h200x2_memcheck (350M) picked again the same way
# (predicted within 5% of the capacity, either side) and measured again. Run from the
# project root, $OUT set; $1 is 1.6b or 350m.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_b_$1.log
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/nvidia-smi.txt"
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "$mem" -lt 100000 ]; then echo "not an H200 pair: the batches are sized for 139.8 GiB"; exit 3; fi
case $1 in
  1.6b) B="52 54 84 88 92 96 104 108"; M=gpt2-1.6b-train ;;
  350m) B="78 81 84 130 136 140 148 156 162 168"; M=gpt2-350m-train ;;
esac
s=$SECONDS
timeout -s INT -k 30 ${2:-480} python3 -m grid_search.study measure --model $M \
    --dtype Float16 --batch-sizes $B --max-devices 2 \
    --max-microbatches 2 --memory-check --margin 0.05 --max-configs 14 --hardware h200-sxm \
    --steps 2 --warmup 1 -o "$OUT/${M}_capacity.csv" >> "$L" 2>&1
echo "### $M rc $? after $((SECONDS - s)) s" >> "$L"
grep -v "^\s*File\|^    " "$L" | grep "###\|measured D\|memory check" | tail -20
