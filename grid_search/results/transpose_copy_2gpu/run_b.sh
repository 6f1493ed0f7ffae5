#!/bin/bash
# Call B (2 GPUs): after the backend also copies transposes of unaligned rows (GPT-2's tied
# LM head, vocabulary 50257): (1) the 16 x 1536 training and inference b8 D1 steps explained
# again with every op's kernels; (2) the 16 x 1536 and 20 x 1280 studies measured again
# (every D*T*P <= 2, replayed); (3) another new held-out workload, a GPT-2 of 12 layers x
# 2560, 20 heads, bfloat16, training step and inference. Run from the project root, $OUT set.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_b.log
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
HW=h200-sxm
W=/tmp/explain
mkdir -p $W
for c in "b_train_b8_d1 gpt2-16-1536-12-train" "b_infer_b8_d1 gpt2-16-1536-12"; do
  set -- $c
  s=$SECONDS
  timeout -s INT -k 20 150 python3 -m grid_search.study explain --model "$2" --dtype BFloat16 \
      --batch-size 8 --cuda-graph --hardware calibration/profiles/h200-sxm-graph.json \
      --stages-hardware $HW --steps 10 --warmup 3 -o "$W/$1" > "$W/$1.out" 2>&1
  echo "### $1 rc $? after $((SECONDS - s)) s" >> "$L"
  python3 grid_search/results/graph_heldout_explain/kernels.py "$W/$1/prof" 0 "$OUT/$1_kernels.csv" >> "$L" 2>&1
  cp "$W/$1/explain.txt" "$OUT/$1.txt"
done
S="python3 -m grid_search.study measure --dtype BFloat16 --batch-sizes 8 32 --max-devices 2 --cuda-graph --timeout 40 --hardware $HW"
for m in "gpt2-16-1536-12-train 8 b_gpt2_16x1536_train_bf16" "gpt2-16-1536-12 4 b_gpt2_16x1536_bf16" \
         "gpt2-20-1280-10-train 8 b_gpt2_20x1280_train_bf16" "gpt2-20-1280-10 4 b_gpt2_20x1280_bf16" \
         "gpt2-12-2560-20-train 8 b_gpt2_12x2560_train_bf16" "gpt2-12-2560-20 4 b_gpt2_12x2560_bf16"; do
  set -- $m
  s=$SECONDS
  timeout -s INT -k 20 150 $S --model $1 --max-microbatches $2 -o "$W/${3}_graph_measured.csv" >> "$L" 2>&1
  echo "### $1 rc $? after $((SECONDS - s)) s" >> "$L"
done
(cd $W && tar czf $OUT/b_measured.tgz b_*_graph_measured.csv)
uptime >> "$L"
grep -v "^\s*File\|^    " "$L" | grep "###\|measured D" | tail -70
