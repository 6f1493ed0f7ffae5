#!/bin/bash
# Issue 19: the plans distir optimize found for GPT-2 350M training (float16, batch 8) on 2
# devices, run for real. The plans were searched beforehand on the 2-core machine with the
# H200 profile (command in README.md) and carried in plans2/; on another card the search
# runs here with that card's profile.
set -u
nvidia-smi > "$OUT/nvidia-smi.txt"
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*)
    python3 -m distir optimize --run-plans plans2 --backend nccl --steps 10 --warmup 3 \
        --csv "$OUT/gpt2_350m_train_b8_plans_measured.csv" > "$OUT/run.log" 2>&1 ;;
  *)
    python3 -m distir optimize --model gpt2-350m-train --dtype Float16 --devices 2 \
        --batch-size 8 --hardware h100-sxm --beam 8 --max-states 200 --top 5 --run-top 3 \
        --steps 10 --warmup 3 --csv "$OUT/gpt2_350m_train_b8_plans_measured.csv" \
        > "$OUT/run.log" 2>&1 ;;
esac
echo "rc $?" >> "$OUT/run.log"
cat "$OUT/run.log"
