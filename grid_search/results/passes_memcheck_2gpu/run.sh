#!/bin/bash
# Two H200s, uncapped (the card's own 139.8 GiB): the memory check of
# ../h200x2_allocator_r2/ (GPT-2 1.6B and 350M training, float16, Adam; configurations
# predicted within 5% of the capacity, either side) with the programs dtp writes since it
# became the spmd passes' composition (study measure --transform passes, the default).
# Run from the project root, $OUT set.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run.log
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/nvidia-smi.txt"
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "$mem" -lt 100000 ]; then echo "not an H200 pair: the batches are sized for 139.8 GiB"; exit 3; fi
for m in 1.6b 350m; do
  case $m in
    1.6b) B="52 54 84 88 92 96 104 108"; M=gpt2-1.6b-train ;;
    350m) B="78 81 84 130 136 140 148 156 162 168"; M=gpt2-350m-train ;;
  esac
  s=$SECONDS
  timeout -s INT -k 30 240 python3 -m grid_search.study measure --model $M \
      --dtype Float16 --batch-sizes $B --max-devices 2 \
      --max-microbatches 2 --memory-check --margin 0.05 --max-configs 14 --hardware h200-sxm \
      --steps 2 --warmup 1 --transform passes -o "$OUT/${M}_capacity.csv" >> "$L" 2>&1
  echo "### $M rc $? after $((SECONDS - s)) s" >> "$L"
done
grep -v "^\s*File\|^    " "$L" | grep "###\|measured D\|memory check" | tail -40
