#!/bin/bash
# Two GPUs: GPT-2 350M training (float16, Adam), one step per configuration, the memory
# allocated per op of each rank beside the liveness model (calibration.memory_trace).
# The batch of the first run is the one that ran out of memory at 137.98 GiB on 2 x H200
# (grid_search/results/h200x2_memcheck); on an H100 pair, a batch scaled to its capacity.
set -u
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True  # as the backend's workers run
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/nvidia-smi.txt"
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "$mem" -gt 100000 ]; then hw=h200-sxm; big=140; else hw=h100-sxm; big=76; fi
echo "profile $hw, batch $big" | tee "$OUT/memtrace.log"
trace() {  # nproc batch config name
    timeout -k 20 240 torchrun --nproc_per_node "$1" -m calibration.memory_trace measure \
        --model gpt2-350m-train --dtype Float16 --hardware "$hw" --batch-size "$2" \
        --config "$3" -o "$OUT/traces/$4.csv" > "$OUT/traces/$4.txt" 2>&1
    echo "== $4 (batch $2, D,T,P,K $3): rc $?" | tee -a "$OUT/memtrace.log"
    grep -v "^W1\|OMP_NUM\|^\*\*\*" "$OUT/traces/$4.txt" | tail -40 >> "$OUT/memtrace.log"
}
mkdir -p "$OUT/traces"
trace 2 "$big" 1,1,2,2 "b${big}_p2k2"
trace 1 32 1,1,1,1 b32_single
trace 2 32 1,1,2,2 b32_p2k2
trace 2 32 1,2,1,1 b32_t2
trace 2 32 2,1,1,1 b32_d2
(cd "$OUT" && tar czf traces.tgz traces && rm -rf traces)
cat "$OUT/memtrace.log"
