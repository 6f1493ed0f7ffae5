#!/bin/bash
# 1 GPU (1 x H200 here). The `concat` family again, with parts that are views (a zero part
# expanded from a scalar: `Concat ... s1`), float32 and bfloat16, device time,
# measurements only. Run from the project root, $OUT set, COMMIT holding the commit.
set -u
L=$OUT/run_c.log
echo "### project commit $(cat COMMIT)" > "$L"
nvidia-smi -L >> "$L"
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
s=$SECONDS
timeout 400 python3 -m calibration --base $HW --device-time --no-comm --devices 1 \
  --dtypes Float32 BFloat16 --measure-only --families concat \
  -o $OUT/$HW-graph-concat.json >> "$L" 2>&1
echo "### concat rc $? after $((SECONDS - s)) s" >> "$L"
grep "###\|rror\|concat:" "$L" | tail
