#!/bin/bash
# Four GPUs, one lease: (1) the backend's host dispatch per op type, on tiny programs
# (calibration.bench_dispatch's defaults), (2) the same on the GPT-2 350M training step at
# batch 8 (a check that the tiny programs' figures carry over, not used to fit), (3) the
# GPT-2 350M training study (every D/T/P/K with D*T*P <= 4, batch 8 and 32) on the same
# machine, to compare the simulator with and without host dispatch.
set -u
export NCCL_NVLS_ENABLE=0
nvidia-smi > "$OUT/nvidia-smi.txt"
(lscpu; echo; nproc; uptime) > "$OUT/host.txt" 2>&1
timeout -s INT -k 20 110 torchrun --nproc_per_node 4 -m calibration.bench_dispatch measure \
    -o "$OUT/dispatch.csv" > "$OUT/dispatch.log" 2>&1
echo "dispatch rc $?" >> "$OUT/run.log"
timeout -s INT -k 20 100 torchrun --nproc_per_node 4 -m calibration.bench_dispatch measure \
    --workloads gpt2-350m-train --batch-size 8 --steps 5 --warmup 2 \
    --configs 4,1,1,1 2,2,1,1 1,1,4,4 2,1,2,4 1,4,1,1 \
    -o "$OUT/dispatch_350m_b8.csv" > "$OUT/dispatch_350m.log" 2>&1
echo "dispatch 350m rc $?" >> "$OUT/run.log"
timeout -s INT -k 20 330 python3 -m grid_search.study measure --model gpt2-350m-train \
    --dtype Float16 --batch-sizes 8 32 --max-devices 4 --max-microbatches 8 \
    -o "$OUT/gpt2_350m_train_measured.csv" >> "$OUT/run.log" 2>&1
echo "study rc $?" >> "$OUT/run.log"
(uptime) >> "$OUT/host.txt" 2>&1
tail -3 "$OUT/dispatch.log" "$OUT/dispatch_350m.log"; tail -45 "$OUT/run.log"
