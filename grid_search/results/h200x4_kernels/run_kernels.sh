#!/bin/bash
# Four GPUs, one call: (1) this machine's host dispatch per op type (calibration.bench_dispatch
# on its tiny programs), (2) the GPT-2 350M training step (float16) at batch 8 and 32 for the
# configurations the simulator misses most and a few it gets right, each with one step
# profiled without per-op marks (kernels and CUDA runtime calls only), (3) the summary of
# those traces (grid_search.kernel_timeline).
set -u
export NCCL_NVLS_ENABLE=0
nvidia-smi > "$OUT/nvidia-smi.txt"
(lscpu; echo; nproc; uptime) > "$OUT/host.txt" 2>&1
timeout -s INT -k 20 110 torchrun --nproc_per_node 4 -m calibration.bench_dispatch measure \
    -o "$OUT/dispatch.csv" > "$OUT/dispatch.log" 2>&1
echo "dispatch rc $?" >> "$OUT/run.log"
timeout -s INT -k 20 300 python3 -m grid_search.study measure --model gpt2-350m-train \
    --dtype Float16 --batch-sizes 8 --max-devices 4 --max-microbatches 8 \
    --configs 4,1,1,1 2,2,1,1 1,4,1,1 1,2,2,8 2,1,2,4 1,1,4,4 1,1,1,1 \
    --profile /tmp/k --profile-kernels -o "$OUT/measured_b8.csv" >> "$OUT/run.log" 2>&1
echo "study b8 rc $?" >> "$OUT/run.log"
timeout -s INT -k 20 120 python3 -m grid_search.study measure --model gpt2-350m-train \
    --dtype Float16 --batch-sizes 32 --max-devices 4 --max-microbatches 8 \
    --configs 4,1,1,1 1,2,2,8 1,1,1,1 \
    --profile /tmp/k --profile-kernels -o "$OUT/measured_b32.csv" >> "$OUT/run.log" 2>&1
echo "study b32 rc $?" >> "$OUT/run.log"
python3 -m grid_search.kernel_timeline /tmp/k/* -o "$OUT/kernels.json" > "$OUT/kernels.txt" 2>&1
(cd /tmp/k && tar czf "$OUT/traces_rank0.tgz" */rank0.json 2>/dev/null)
ls -la "$OUT" >> "$OUT/run.log"
(uptime) >> "$OUT/host.txt" 2>&1
cat "$OUT/kernels.txt"; tail -20 "$OUT/run.log"
