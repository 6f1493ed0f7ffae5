#!/bin/bash
# Two H200s: GPT-2 350M training, batch 140, D1 T1 P2 K2 (rank 0 runs out of memory, rank 1
# completes), traced per op with each rank's allocator history (every allocation and free
# with its address), to compare the allocator's placements with the replay's.
set -u
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True  # as the backend's workers run
nvidia-smi --query-gpu=name,memory.total --format=csv > "$OUT/nvidia-smi3.txt"
timeout -k 20 300 torchrun --nproc_per_node 2 -m calibration.memory_trace measure \
    --model gpt2-350m-train --dtype Float16 --hardware h200-sxm --batch-size 140 \
    --config 1,1,2,2 --snapshot "$OUT/snap" -o "$OUT/b140_p2k2_snap.csv" > "$OUT/snap.log" 2>&1
echo "rc $?"; grep "^rank" "$OUT/snap.log"
(cd "$OUT" && tar czf snap.tgz snap b140_p2k2_snap.csv && rm -rf snap b140_p2k2_snap.csv)
ls -la "$OUT"
