#!/bin/bash
# Four GPUs: distir explain of GPT-2 1.6B inference (development workload), float16, batch
# 16: P4 x K4 and T4, the multi-device classes the held-out inference study under-predicts.
set -u
export NCCL_NVLS_ENABLE=0
nvidia-smi -L > "$OUT/explain4.log"
for c in "1 4 4" "4 1 1"; do
  set -- $c
  echo "### T$1 P$2 K$3" >> "$OUT/explain4.log"
  timeout -s INT -k 20 80 python3 -m grid_search.study explain --model gpt2-1.6b \
    --dtype Float16 --batch-size 16 --dp 1 --tp $1 --pp $2 --microbatches $3 \
    --hardware calibration/profiles/h200-sxm.json --steps 5 --warmup 2 --top 30 \
    --traces /tmp/prof4_$1_$2 -o /tmp/ex4_t$1_p$2 >> "$OUT/explain4.log" 2>&1
  echo "### rc $?" >> "$OUT/explain4.log"
done
(cd /tmp && tar czf "$OUT/explain4.tgz" ex4_*/explain.txt ex4_*/explain.json) >> "$OUT/explain4.log" 2>&1
grep -B2 -A22 "^step:" "$OUT/explain4.log" | head -80
