#!/bin/bash
# 2 GPUs, one call: the host dispatch of each rank (calibration.bench_dispatch on its tiny
# programs), then D1, T2 and D2 of the GPT-2 350M training step at batch 8, timed, then one
# step each profiled without marks (the GPU's activity only), all ranks' traces in one
# archive: which rank reaches the collectives late when nothing is marked.
set -u
export NCCL_NVLS_ENABLE=0
timeout -s INT -k 20 110 torchrun --nproc_per_node 2 -m calibration.bench_dispatch measure \
    -o "$OUT/dispatch.csv" > "$OUT/traces2.log" 2>&1
echo "dispatch rc $?" >> "$OUT/traces2.log"
timeout -s INT -k 20 300 python3 -m grid_search.study measure --model gpt2-350m-train \
    --dtype Float16 --batch-sizes 8 --max-devices 2 --max-microbatches 8 \
    --configs 2,1,1,1 1,2,1,1 1,1,1,1 --profile /tmp/u --profile-kernels \
    -o "$OUT/measured_unmarked.csv" >> "$OUT/traces2.log" 2>&1
echo "study rc $?" >> "$OUT/traces2.log"
python3 -m grid_search.kernel_timeline /tmp/u/* >> "$OUT/traces2.log" 2>&1
gzip "$OUT/dispatch.csv"
(cd /tmp/u && tar czf "$OUT/unmarked_traces.tgz" */rank*.json)
(nvidia-smi -L; uptime) >> "$OUT/traces2.log" 2>&1
tail -20 "$OUT/traces2.log"
