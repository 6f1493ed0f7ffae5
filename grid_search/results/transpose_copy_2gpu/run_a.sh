#!/bin/bash
# Call A (2 GPUs): after the backend made batch-axis transposes contiguous (once, where the
# cost model charges them), (1) the 16 x 1536 transformer's training b8 D1 step explained
# again with every op's kernels (as ../graph_heldout_explain/ call B did before); (2) its
# replayed study (every D*T*P <= 2) measured again; (3) a new held-out workload, a GPT-2
# of 20 layers x 1280, 10 heads, bfloat16, training step and inference, replayed.
# Run from the project root, $OUT set.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_a.log
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
HW=h200-sxm
W=/tmp/explain
mkdir -p $W
s=$SECONDS
timeout -s INT -k 20 150 python3 -m grid_search.study explain --model gpt2-16-1536-12-train \
    --dtype BFloat16 --batch-size 8 --cuda-graph --hardware calibration/profiles/h200-sxm-graph.json \
    --stages-hardware $HW --steps 10 --warmup 3 -o "$W/train_b8_d1" > "$W/train_b8_d1.out" 2>&1
echo "### explain rc $? after $((SECONDS - s)) s" >> "$L"
python3 grid_search/results/graph_heldout_explain/kernels.py "$W/train_b8_d1/prof" 0 \
    "$OUT/train_b8_d1_kernels.csv" >> "$L" 2>&1
cp "$W/train_b8_d1/explain.txt" "$OUT/train_b8_d1.txt"
S="python3 -m grid_search.study measure --dtype BFloat16 --batch-sizes 8 32 --max-devices 2 --cuda-graph --timeout 40 --hardware $HW"
for m in "gpt2-16-1536-12-train 8 gpt2_16x1536_train_bf16" "gpt2-16-1536-12 4 gpt2_16x1536_bf16" \
         "gpt2-20-1280-10-train 8 gpt2_20x1280_train_bf16" "gpt2-20-1280-10 4 gpt2_20x1280_bf16"; do
  set -- $m
  s=$SECONDS
  timeout -s INT -k 20 150 $S --model $1 --max-microbatches $2 -o "$OUT/${3}_graph_measured.csv" >> "$L" 2>&1
  echo "### $1 rc $? after $((SECONDS - s)) s" >> "$L"
done
uptime >> "$L"
grep -v "^\s*File\|^    " "$L" | grep "###\|measured D" | tail -60
