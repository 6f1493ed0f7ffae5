#!/bin/bash
# Call B (2 GPUs, asked nvidia-h100-x2): the held-out bfloat16 transformer of
# ../graph_heldout_4gpu/ (GPT-2-shaped, 16 layers x 1536, 12 heads, sequence 1024),
# training step and inference, every D*T*P <= 2, each step replayed as a CUDA graph; stages
# weighed with the profile of the card that runs them. Run from the project root, $OUT set.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_b.log
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;;
  *) HW=h100-sxm ;;
esac
S="python3 -m grid_search.study measure --dtype BFloat16 --batch-sizes 8 32 --max-devices 2"
s=$SECONDS
timeout -s INT -k 20 300 $S --model gpt2-16-1536-12-train --max-microbatches 8 --cuda-graph \
    --timeout 40 --hardware $HW -o "$OUT/gpt2_16x1536_train_bf16_graph_measured.csv" >> "$L" 2>&1
echo "### training rc $? after $((SECONDS - s)) s" >> "$L"
s=$SECONDS
timeout -s INT -k 20 200 $S --model gpt2-16-1536-12 --max-microbatches 4 --cuda-graph \
    --timeout 40 --hardware $HW -o "$OUT/gpt2_16x1536_bf16_graph_measured.csv" >> "$L" 2>&1
echo "### inference rc $? after $((SECONDS - s)) s" >> "$L"
uptime >> "$L"
grep -v "^\s*File\|^    " "$L" | tail -30
