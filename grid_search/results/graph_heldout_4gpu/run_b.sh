#!/bin/bash
# Call B (4 GPUs): the held-out bfloat16 transformer of ../heldout_bf16_r2/ (GPT-2-shaped,
# 16 layers x 1536, 12 heads, sequence 1024), training step and inference, every D*T*P <= 4,
# each step replayed as a CUDA graph (a hung run is declared after 40 s). Pipeline stages are
# weighed with the profile of the card that runs them. Run from the project root, $OUT set.
set -u
export NCCL_NVLS_ENABLE=0  # NCCL_GRAPH_REGISTER=0 is set by the backend (procs.graph_env)
L=$OUT/run_b.log
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;;
  *) HW=h100-sxm ;;
esac
S="python3 -m grid_search.study measure --dtype BFloat16 --batch-sizes 8 32 --max-devices 4"
s=$SECONDS
timeout -s INT -k 20 330 $S --model gpt2-16-1536-12-train --max-microbatches 8 --cuda-graph \
    --timeout 40 --hardware $HW -o "$OUT/gpt2_16x1536_train_bf16_graph_measured.csv" >> "$L" 2>&1
echo "### training rc $? after $((SECONDS - s)) s" >> "$L"
s=$SECONDS
timeout -s INT -k 20 200 $S --model gpt2-16-1536-12 --max-microbatches 4 --cuda-graph \
    --timeout 40 --hardware $HW -o "$OUT/gpt2_16x1536_bf16_graph_measured.csv" >> "$L" 2>&1
echo "### inference rc $? after $((SECONDS - s)) s" >> "$L"
uptime >> "$L"
grep -v "^\s*File\|^    " "$L" | tail -40
