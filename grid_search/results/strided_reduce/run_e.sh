#!/bin/bash
# 1 GPU (1 x H200 here). (1) the `reduce` family timed right after its input is written
# (calibration.bench_train.AFTER_WRITER), (2) the `concat` family with rank-4 results
# added; float32 and bfloat16, device time, measurements only.
# Run from the project root, $OUT set, COMMIT holding the commit.
set -u
L=$OUT/run_e.log
echo "### project commit $(cat COMMIT)" > "$L"
nvidia-smi -L >> "$L"
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
s=$SECONDS
for fam in reduce concat; do
  timeout 300 python3 -m calibration --base $HW --device-time --no-comm --devices 1 \
    --dtypes Float32 BFloat16 --measure-only --families $fam \
    -o $OUT/$HW-graph-$fam.json >> "$L" 2>&1
  echo "### $fam rc $? after $((SECONDS - s)) s" >> "$L"
done
grep "###\|rror\|measurements$" "$L" | tail
