#!/bin/bash
# Call B (1 GPU): training b8 D1 and inference b8 D1 of the held-out transformer explained
# again as in call A, and every op's kernels listed, eager and replayed (kernels.py).
# Run from the project root, $OUT set.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_b.log
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
W=/tmp/explain
mkdir -p $W
for c in "train_b8_d1 gpt2-16-1536-12-train" "infer_b8_d1 gpt2-16-1536-12"; do
  set -- $c
  s=$SECONDS
  timeout -s INT -k 20 150 python3 -m grid_search.study explain --model "$2" --dtype BFloat16 \
      --batch-size 8 --cuda-graph --hardware calibration/profiles/h200-sxm-graph.json \
      --stages-hardware h200-sxm --steps 10 --warmup 3 -o "$W/$1" > "$W/$1.out" 2>&1
  echo "### $1 rc $? after $((SECONDS - s)) s" >> "$L"
  python3 grid_search/results/graph_heldout_explain/kernels.py "$W/$1/prof" 0 "$OUT/$1_kernels.csv" >> "$L" 2>&1
  cp "$W/$1/explain.txt" "$OUT/$1.txt"
done
uptime >> "$L"
tail -8 "$L"
