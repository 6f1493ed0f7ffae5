#!/bin/bash
# Beside run_study.sh on the same machine (the next call): eight of its batch-8
# configurations timed eagerly, one call per op, for the speed-up of graph replays.
set -u
export NCCL_NVLS_ENABLE=0
timeout -s INT -k 10 150 python3 -m grid_search.study measure --model gpt2-350m-train \
    --dtype Float16 --batch-sizes 8 --max-devices 4 --max-microbatches 8 --timeout 40 \
    --configs 1,1,1,1 4,1,1,1 2,2,1,1 1,2,2,8 2,1,2,4 1,1,4,4 1,1,4,8 1,4,1,1 \
    -o "$OUT/gpt2_350m_train_eager_b8_measured.csv" > "$OUT/eager.log" 2>&1
echo "rc $?" >> "$OUT/eager.log"
grep -v "^\s*File\|^    " "$OUT/eager.log" | tail -12
