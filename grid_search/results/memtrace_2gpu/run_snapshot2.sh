#!/bin/bash
# Two H200s: GPT-2 1.6B training, batch 92, D1 T1 P2 K2 (ran in ../h200x2_allocator though
# the replay put rank 0's reserve at 138.01 GiB), one step traced per op with each rank's
# allocator history, to find where the replay's sequence of requests departs from the run's.
set -u
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True  # as the backend's workers run
nvidia-smi --query-gpu=name,memory.total --format=csv > "$OUT/nvidia-smi4.txt"
timeout -k 20 300 torchrun --nproc_per_node 2 -m calibration.memory_trace measure \
    --model gpt2-1.6b-train --dtype Float16 --hardware h200-sxm --batch-size 92 \
    --config 1,1,2,2 --snapshot "$OUT/snap2" -o "$OUT/b92_p2k2_1.6b.csv" > "$OUT/snap2.log" 2>&1
echo "rc $?"; grep "^rank" "$OUT/snap2.log"
(cd "$OUT" && tar czf snap2.tgz snap2 b92_p2k2_1.6b.csv && rm -rf snap2 b92_p2k2_1.6b.csv)
