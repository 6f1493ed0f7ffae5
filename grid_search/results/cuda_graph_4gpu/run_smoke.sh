#!/bin/bash
# Four GPUs, one call: the GPU tests of the backend (CUDA graphs among them) where pytest is
# installed, then the GPT-2 350M training step (float16) at batch 8, six configurations, each
# timed eagerly and as CUDA graph replays in the same session order (eager first).
set -u
export NCCL_NVLS_ENABLE=0
nvidia-smi -L > "$OUT/host.txt"; (nproc; uptime) >> "$OUT/host.txt" 2>&1
if python3 -m pytest --version > /dev/null 2>&1; then
  timeout -s INT -k 20 150 python3 -m pytest -q -p no:cacheprovider tests/backend/test_gpu.py \
      > "$OUT/gpu_tests.log" 2>&1
  echo "gpu tests rc $?" >> "$OUT/run.log"
else
  echo "no pytest here" >> "$OUT/run.log"
fi
CONFIGS="1,1,1,1 4,1,1,1 2,2,1,1 1,2,2,8 2,1,2,4 1,1,4,4"
timeout -s INT -k 20 150 python3 -m grid_search.study measure --model gpt2-350m-train \
    --dtype Float16 --batch-sizes 8 --max-devices 4 --max-microbatches 8 --configs $CONFIGS \
    -o "$OUT/eager_b8.csv" >> "$OUT/run.log" 2>&1
echo "eager rc $?" >> "$OUT/run.log"
timeout -s INT -k 20 150 python3 -m grid_search.study measure --model gpt2-350m-train \
    --dtype Float16 --batch-sizes 8 --max-devices 4 --max-microbatches 8 --configs $CONFIGS \
    --cuda-graph -o "$OUT/graph_b8.csv" >> "$OUT/run.log" 2>&1
echo "graph rc $?" >> "$OUT/run.log"
uptime >> "$OUT/host.txt"
tail -5 "$OUT/gpu_tests.log" 2>/dev/null; tail -30 "$OUT/run.log"
