#!/bin/bash
# The pipelines that hung as CUDA graphs in run_study.sh, again with NCCL's registration of
# graph-captured buffers off (NCCL_GRAPH_REGISTER=0); a hung run is declared after 40 s.
set -u
export NCCL_NVLS_ENABLE=0 NCCL_GRAPH_REGISTER=0
timeout -s INT -k 10 230 python3 -m grid_search.study measure --model gpt2-350m-train \
    --dtype Float16 --batch-sizes 8 32 --max-devices 4 --max-microbatches 8 --cuda-graph \
    --timeout 40 --configs 1,1,2,2 1,1,2,4 1,1,2,8 1,1,4,2 1,1,4,4 \
    -o "$OUT/register_off_measured.csv" > "$OUT/register.log" 2>&1
echo "rc $?" >> "$OUT/register.log"
python3 - "$OUT/register_off_measured.csv" <<'PY'
import csv, sys
for r in csv.DictReader(open(sys.argv[1])):
    print(r["batch_size"], r["dp"], r["tp"], r["pp"], r["microbatches"], r["measured_status"],
          r["measured_latency_s"], r["reason"][:120])
PY
tail -3 "$OUT/register.log"
