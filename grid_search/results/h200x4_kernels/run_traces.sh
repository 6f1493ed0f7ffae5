#!/bin/bash
# Marked traces (every op a range, CPU and CUDA activity) of the GPT-2 350M training step at
# batch 8 for D1, D2 and T2 on 2 GPUs (no 4-GPU machine was lent), all ranks, in one archive: which op the host is in when the
# compute stream idles (the step's first milliseconds, the long blocking copies).
set -u
export NCCL_NVLS_ENABLE=0
timeout -s INT -k 20 300 python3 -m grid_search.study measure --model gpt2-350m-train \
    --dtype Float16 --batch-sizes 8 --max-devices 2 --max-microbatches 8 \
    --configs 2,1,1,1 1,2,1,1 1,1,1,1 --profile /tmp/m -o "$OUT/measured_marked.csv" \
    > "$OUT/traces.log" 2>&1
echo "study rc $?" >> "$OUT/traces.log"
python3 -m grid_search.kernel_timeline /tmp/m/* -o /tmp/m/kernels.json >> "$OUT/traces.log" 2>&1
(cd /tmp/m && tar czf "$OUT/marked_traces.tgz" */rank*.json kernels.json)
ls -la "$OUT" >> "$OUT/traces.log"; (nvidia-smi -L; uptime) >> "$OUT/traces.log" 2>&1
tail -30 "$OUT/traces.log"
