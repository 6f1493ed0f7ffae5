#!/bin/bash
# Call A (1 H100): the backend's GPU tests, then the held-out GPT-2 12 x 2560 (bfloat16)
# training step and inference on one GPU, replayed as CUDA graphs (the only configuration of
# one GPU, at batch 8 and 32). Run from the project root, $OUT set.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_a.log
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
s=$SECONDS
timeout -s INT -k 20 150 python3 -m pytest -q -p no:cacheprovider tests/backend/test_gpu.py >> "$L" 2>&1
echo "### gpu tests rc $? after $((SECONDS - s)) s" >> "$L"
S="python3 -m grid_search.study measure --dtype BFloat16 --batch-sizes 8 32 --max-devices 1 --cuda-graph --timeout 60 --hardware h100-sxm"
for m in "gpt2-12-2560-20-train gpt2_12x2560_train_bf16" "gpt2-12-2560-20 gpt2_12x2560_bf16"; do
  set -- $m
  s=$SECONDS
  timeout -s INT -k 20 150 $S --model $1 -o "$OUT/${2}_graph_measured.csv" >> "$L" 2>&1
  echo "### $1 rc $? after $((SECONDS - s)) s" >> "$L"
done
uptime >> "$L"
grep -v "^\s*File\|^    " "$L" | grep "###\|measured D\|passed\|failed" | tail -20
