#!/bin/bash
# 1 GPU (1 x H200 here). (1) bias_probe.py: bias adds of a linear layer beside same-shape
# adds and the elementwise_bcast microbenchmark's shape; (2) the new `concat` family
# (calibration.bench_train), float32 and bfloat16, device time, measurements only.
# Run from the project root, $OUT set, COMMIT holding the commit.
set -u
R=grid_search/results/strided_reduce
L=$OUT/run_b.log
echo "### project commit $(cat COMMIT)" > "$L"
nvidia-smi -L >> "$L"
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
s=$SECONDS
timeout 100 python3 $R/bias_probe.py > $OUT/bias_probe.txt 2>> "$L"
echo "### probe rc $? after $((SECONDS - s)) s" >> "$L"
timeout 400 python3 -m calibration --base $HW --device-time --no-comm --devices 1 \
  --dtypes Float32 BFloat16 --measure-only --families concat \
  -o $OUT/$HW-graph-concat.json >> "$L" 2>&1
echo "### concat rc $? after $((SECONDS - s)) s" >> "$L"
grep "###\|rror" "$L" | tail; cat $OUT/bias_probe.txt
