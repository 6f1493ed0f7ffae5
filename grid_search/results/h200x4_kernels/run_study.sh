#!/bin/bash
# The GPT-2 350M training study (float16, every D/T/P/K with D*T*P <= 4, K <= 8, batch 8 and
# 32) on the machine run_kernels2.sh measured the host dispatch of (the next call, warm).
set -u
export NCCL_NVLS_ENABLE=0
timeout -s INT -k 20 420 python3 -m grid_search.study measure --model gpt2-350m-train \
    --dtype Float16 --batch-sizes 8 32 --max-devices 4 --max-microbatches 8 \
    -o "$OUT/gpt2_350m_train_measured.csv" > "$OUT/study_full.log" 2>&1
echo "study rc $?" >> "$OUT/study_full.log"
(nvidia-smi -L; uptime) >> "$OUT/study_full.log" 2>&1
tail -40 "$OUT/study_full.log"
