#!/bin/bash
# One H100: does --memory-limit (torch.cuda.set_per_process_memory_fraction) still cap the
# allocator now that the workers run on expandable segments? MLP 1B at batch 8192 (6.38 GiB
# predicted) and 16384 (10.75 GiB) under an 8 GiB cap; then the same two with fixed segments.
set -u
nvidia-smi -L > "$OUT/run.log"
for conf in default "expandable_segments:False"; do
  echo "### PYTORCH_CUDA_ALLOC_CONF=$conf" >> "$OUT/run.log"
  if [ "$conf" = default ]; then unset PYTORCH_CUDA_ALLOC_CONF; else export PYTORCH_CUDA_ALLOC_CONF=$conf; fi
  python3 -m grid_search.study measure --model mlp-1b --dtype Float16 --batch-sizes 8192 16384 \
      --max-devices 1 --memory-check --memory-limit 8GiB --margin 0.5 --max-configs 2 \
      --steps 2 --warmup 1 -o "$OUT/memcap_${conf%%:*}.csv" >> "$OUT/run.log" 2>&1
done
cat "$OUT/run.log"
