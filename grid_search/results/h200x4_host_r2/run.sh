#!/bin/bash
# One 4-GPU call (asked as nvidia-h100-x4): this machine's host dispatch, then the GPT-2
# 350M training study (development workload) and the held-out bfloat16 training study, to
# compare with the profile of the card that came and this machine's host dispatch.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run.log
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
(lscpu | head -16; uptime) > "$OUT/host.txt" 2>&1
echo "### commit $(cat COMMIT)" >> "$L"
timeout -s INT -k 20 100 torchrun --nproc_per_node 4 -m calibration.bench_dispatch measure \
    -o "$OUT/dispatch.csv" > "$OUT/dispatch.log" 2>&1
echo "### dispatch rc $?" >> "$L"
timeout -s INT -k 20 200 python3 -m grid_search.study measure --model gpt2-16-1536-12-train \
    --dtype BFloat16 --batch-sizes 8 32 --max-devices 4 --max-microbatches 8 \
    -o "$OUT/gpt2_16x1536_train_bf16_measured.csv" >> "$L" 2>&1
echo "### heldout rc $?" >> "$L"
timeout -s INT -k 20 200 python3 -m grid_search.study measure --model gpt2-350m-train \
    --dtype Float16 --batch-sizes 8 32 --max-devices 4 --max-microbatches 8 \
    -o "$OUT/gpt2_350m_train_measured.csv" >> "$L" 2>&1
echo "### 350m rc $?" >> "$L"
grep "###" "$L"; head -1 "$OUT/nvidia-smi.txt"; nvidia-smi -L
