#!/bin/bash
# 4 GPUs, one lease. On 4 x H100: the held-out replayed study of ../passes_4gpu/ (its
# run.sh). On another card: the backend's GPU tests of the host cost (2 GPUs), then the
# held-out GPT-2 12 x 2560 (bfloat16) training step and inference run eagerly as in
# ../eager_heldout_4gpu/, each configuration's host cost of a step measured after its timed
# steps (`study measure`'s default since this commit). Run from the project root, $OUT set.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run.log
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H100*) exec bash grid_search/results/passes_4gpu/run.sh ;;
esac
s=$SECONDS
timeout -s INT -k 20 120 python3 -m pytest -q -o addopts="" -p no:cacheprovider \
    tests/backend/test_gpu.py -k "host_cost or one_gpu_step or distributed_mlp" >> "$L" 2>&1
echo "### gpu tests rc $? after $((SECONDS - s)) s" >> "$L"
S="python3 -m grid_search.study measure --dtype BFloat16 --batch-sizes 8 32 --max-devices 4 --timeout 40 --hardware h200-sxm --transform passes"
s=$SECONDS
timeout -s INT -k 20 260 $S --model gpt2-12-2560-20-train --max-microbatches 8 \
    -o "$OUT/gpt2_12x2560_train_bf16_measured.csv" >> "$L" 2>&1
echo "### training rc $? after $((SECONDS - s)) s" >> "$L"
s=$SECONDS
timeout -s INT -k 20 140 $S --model gpt2-12-2560-20 --max-microbatches 4 \
    -o "$OUT/gpt2_12x2560_bf16_measured.csv" >> "$L" 2>&1
echo "### inference rc $? after $((SECONDS - s)) s" >> "$L"
uptime >> "$L"
grep -v "^\s*File\|^    " "$L" | grep "###\|measured D\|passed\|failed\|Error" | tail -80
