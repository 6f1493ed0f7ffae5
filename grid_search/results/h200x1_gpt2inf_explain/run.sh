#!/bin/bash
# One GPU: distir explain of GPT-2 1.6B inference (a development workload), float16, batch
# 4 and 16, with the recalibrated h200-sxm: what an inference step spends that the
# simulator misses (the held-out inference study is predicted 8% too fast).
set -u
nvidia-smi -L > "$OUT/explain.log"
for B in 16 4; do
  echo "### batch $B" >> "$OUT/explain.log"
  timeout -s INT -k 20 100 python3 -m grid_search.study explain --model gpt2-1.6b \
    --dtype Float16 --batch-size $B --dp 1 --tp 1 --pp 1 --microbatches 1 \
    --hardware calibration/profiles/h200-sxm.json --steps 5 --warmup 2 --top 30 \
    --traces /tmp/prof_$B -o /tmp/ex_b$B >> "$OUT/explain.log" 2>&1
  echo "### rc $?" >> "$OUT/explain.log"
done
(cd /tmp && tar czf "$OUT/explain.tgz" ex_b*/explain.txt ex_b*/explain.json) >> "$OUT/explain.log" 2>&1
grep -A28 "^gpt2" "$OUT/explain.log" | head -70
