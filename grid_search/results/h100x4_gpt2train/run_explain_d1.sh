#!/bin/bash
# Second call: explain the single-GPU GPT-2 350M training step (no communication) at both
# batch sizes of the study, to see what the uniform under-prediction is made of.
set -u
nvidia-smi -L > "$OUT/explain_d1.log"
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=calibration/profiles/h200-sxm.json ;;
  *) HW=calibration/profiles/h100-sxm.json ;;
esac
for B in 8 32; do
  echo "### batch $B, profile $HW" >> "$OUT/explain_d1.log"
  timeout -s INT -k 20 200 python3 -m grid_search.study explain --model gpt2-350m-train \
    --dtype Float16 --batch-size $B --hardware "$HW" --steps 10 --warmup 3 --top 40 \
    --traces /tmp/prof_b$B -o /tmp/explain_d1_b$B >> "$OUT/explain_d1.log" 2>&1
  echo "### rc $?" >> "$OUT/explain_d1.log"
done
(cd /tmp && tar czf "$OUT/explain_d1.tgz" explain_d1_b8/explain.txt explain_d1_b8/explain.json \
  explain_d1_b32/explain.txt explain_d1_b32/explain.json) >> "$OUT/explain_d1.log" 2>&1
