#!/bin/bash
# Second lease: distir explain of the batch-8 data- and tensor-parallel steps the host
# dispatch model left most under-predicted (D4, D2 x T2, T4), and D4 at batch 32, with the
# profile that models host dispatch.
set -u
export NCCL_NVLS_ENABLE=0
nvidia-smi -L > "$OUT/explain.log"
HW=calibration/profiles/h200-sxm-host.json
for c in "8 4 1" "8 2 2" "8 1 4" "32 4 1"; do
  set -- $c
  echo "### batch $1 D$2 T$3" >> "$OUT/explain.log"
  timeout -s INT -k 20 110 python3 -m grid_search.study explain --model gpt2-350m-train \
    --dtype Float16 --batch-size $1 --dp $2 --tp $3 --pp 1 --microbatches 1 --hardware $HW \
    --steps 10 --warmup 3 --top 30 --traces /tmp/prof_$1_$2_$3 -o /tmp/ex_b$1_d$2_t$3 \
    >> "$OUT/explain.log" 2>&1
  echo "### rc $?" >> "$OUT/explain.log"
done
(cd /tmp && tar czf "$OUT/explain.tgz" ex_*/explain.txt ex_*/explain.json) >> "$OUT/explain.log" 2>&1
grep -A12 "^step:\|per device" "$OUT/explain.log" | head -120
