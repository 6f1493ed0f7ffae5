#!/bin/bash
# One H100: the backend's half-precision cross entropy (old and new side by side), the
# single-GPU GPT-2 350M training step measured (latency, peak memory) and explained per op.
set -u
nvidia-smi > "$OUT/nvidia-smi.txt"
HW=calibration/profiles/h100-sxm.json
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=calibration/profiles/h200-sxm.json ;;
esac
echo "profile $HW" > "$OUT/run.log"
python3 benchmarks/bench_cross_entropy.py --rows 8192 32768 >> "$OUT/run.log" 2>&1
python3 -m grid_search.study measure --model gpt2-350m-train --dtype Float16 --batch-sizes 8 32 \
    --max-devices 1 -o "$OUT/gpt2_350m_train_d1_measured.csv" >> "$OUT/run.log" 2>&1
for B in 8 32; do
  echo "### explain batch $B" >> "$OUT/run.log"
  timeout -s INT -k 20 200 python3 -m grid_search.study explain --model gpt2-350m-train \
    --dtype Float16 --batch-size $B --hardware "$HW" --steps 10 --warmup 3 --top 40 \
    -o /tmp/explain_b$B >> "$OUT/run.log" 2>&1
  echo "### rc $?" >> "$OUT/run.log"
  cp /tmp/explain_b$B/explain.txt "$OUT/explain_d1_b$B.txt" 2>/dev/null
done
