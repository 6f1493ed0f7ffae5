#!/bin/bash
# Two H100s: what the card holds outside the allocator, then GPT-2 350M training
# configurations predicted near the H100's own capacity, run uncapped (expandable
# segments, the backend's default). On other cards only the probe runs.
set -u
nvidia-smi > "$OUT/nvidia-smi.txt"
python3 -m calibration.memory_overhead --gpus 2 --groups 2 -o "$OUT/overhead.json" 2>&1 \
    | grep -v Warning > "$OUT/overhead.log"
cat "$OUT/overhead.log"
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H100*)
    timeout -s INT -k 30 420 python3 -m grid_search.study measure --model gpt2-350m-train \
        --dtype Float16 --batch-sizes 42 44 46 68 72 76 80 84 88 92 --max-devices 2 \
        --max-microbatches 2 --memory-check --margin 0.06 --max-configs 14 \
        --hardware h100-sxm --steps 3 --warmup 1 -o "$OUT/gpt2_350m_train_capacity.csv" \
        > "$OUT/measure.log" 2>&1
    echo "measure rc $?"; tail -16 "$OUT/measure.log" ;;
esac
