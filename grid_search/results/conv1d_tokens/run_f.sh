#!/bin/bash
# 1 GPU (1 x H200 here). The `reduce` family (column sums, a bias gradient's) at quarter
# octaves (calibration.bench_train.quarter_sizes), float32, device time, measurements only.
# Run from the project root, $OUT set, COMMIT holding the commit.
set -u
L=$OUT/run_f.log
echo "### project commit $(cat COMMIT)" > "$L"
nvidia-smi -L >> "$L"
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
s=$SECONDS
timeout 240 python3 -m calibration --base $HW --device-time --no-comm --devices 1 \
  --dtypes Float32 --measure-only --families reduce -o $OUT/$HW-graph-reduce.json >> "$L" 2>&1
echo "### reduce rc $? after $((SECONDS - s)) s" >> "$L"
grep "###" "$L"; tail -n 3 "$L"
