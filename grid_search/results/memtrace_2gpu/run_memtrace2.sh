#!/bin/bash
# Two GPUs, the configurations of the H200 capacity study (grid_search/results/h200x2_memcheck)
# that ran or ran out nearest the capacity, traced per op with the allocator's reserved
# bytes and, at an out-of-memory, its state and what lay outside it.
set -u
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True  # as the backend's workers run
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/nvidia-smi2.txt"
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "$mem" -lt 100000 ]; then echo "not an H200 pair: the study's batches need 139.8 GiB"; exit 3; fi
: > "$OUT/memtrace2.log"
trace() {  # nproc batch config name
    timeout -k 20 240 torchrun --nproc_per_node "$1" -m calibration.memory_trace measure \
        --model gpt2-350m-train --dtype Float16 --hardware h200-sxm --batch-size "$2" \
        --config "$3" -o "$OUT/traces2/$4.csv" > "$OUT/traces2/$4.txt" 2>&1
    echo "== $4 (batch $2, D,T,P,K $3): rc $?" | tee -a "$OUT/memtrace2.log"
    grep "^rank" "$OUT/traces2/$4.txt" >> "$OUT/memtrace2.log"
}
mkdir -p "$OUT/traces2"
trace 2 140 1,1,2,2 b140_p2k2
trace 2 130 1,2,1,1 b130_t2
trace 1 78 1,1,1,1 b78_single
trace 1 81 1,1,1,1 b81_single
(cd "$OUT" && tar czf traces2.tgz traces2 && rm -rf traces2)
cat "$OUT/memtrace2.log"
