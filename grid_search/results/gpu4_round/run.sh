#!/bin/bash
# Four GPUs: (1) issue 19: distir optimize's top 3 plans for GPT-2 350M training (float16,
# batch 8) run for real; (2) issue 16: the GPT-2 350M training study, every D/T/P/K with
# D*T*P <= 4, batch 8 and 32, measured again with the programs the transform builds today.
set -u
nvidia-smi > "$OUT/nvidia-smi.txt"
HW=h100-sxm
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;;
esac
echo "profile $HW" > "$OUT/run.log"
timeout -s INT -k 30 240 python3 -m distir optimize --model gpt2-350m-train --dtype Float16 \
    --devices 4 --batch-size 8 --hardware $HW --beam 8 --max-states 200 --budget 90 --top 5 \
    --run-top 3 --steps 10 --warmup 3 --csv "$OUT/optimize_gpt2_350m_train_b8.csv" \
    > "$OUT/optimize.log" 2>&1
echo "optimize rc $?" >> "$OUT/run.log"
timeout -s INT -k 30 330 python3 -m grid_search.study measure --model gpt2-350m-train \
    --dtype Float16 --batch-sizes 8 32 --max-devices 4 --max-microbatches 8 \
    -o "$OUT/gpt2_350m_train_measured.csv" >> "$OUT/run.log" 2>&1
echo "study rc $?" >> "$OUT/run.log"
tail -5 "$OUT/optimize.log"; tail -40 "$OUT/run.log"
