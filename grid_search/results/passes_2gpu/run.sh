#!/bin/bash
# 2 GPUs (asked for as H100s; run on whatever card came, named in run.log): the held-out GPT-2 12 x 2560 (20 heads, bfloat16), training step and inference,
# every D*T*P <= 2, each step replayed as a CUDA graph, the programs written by dtp as it
# is now (the spmd passes' composition, `study measure --transform passes`, the default);
# stages weighed with the card's profile (h100-sxm or h200-sxm, as the search would).
# Run from the project root, $OUT set.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run.log
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;;
  *) HW=h100-sxm ;;
esac
echo "### stages weighed with $HW" >> "$L"
S="python3 -m grid_search.study measure --dtype BFloat16 --batch-sizes 8 32 --max-devices 2 --cuda-graph --timeout 40 --hardware $HW --transform passes"
s=$SECONDS
timeout -s INT -k 20 260 $S --model gpt2-12-2560-20-train --max-microbatches 8 \
    -o "$OUT/gpt2_12x2560_train_bf16_graph_measured.csv" >> "$L" 2>&1
echo "### training rc $? after $((SECONDS - s)) s" >> "$L"
s=$SECONDS
timeout -s INT -k 20 130 $S --model gpt2-12-2560-20 --max-microbatches 4 \
    -o "$OUT/gpt2_12x2560_bf16_graph_measured.csv" >> "$L" 2>&1
echo "### inference rc $? after $((SECONDS - s)) s" >> "$L"
uptime >> "$L"
grep -v "^\s*File\|^    " "$L" | grep "###\|measured D" | tail -60
