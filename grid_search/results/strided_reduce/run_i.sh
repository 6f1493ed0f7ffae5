#!/bin/bash
# 1 GPU (1 x H200 here). The
# batched product families (bmm, and bmm_nt / bmm_tn with the rest of bench_matmul_grad's
# families) with a second sample of 160 small products (--seed 1: batches between the powers of two too), float32, device time,
# measurements only. Run from the project root, $OUT set, COMMIT holding the commit.
set -u
L=$OUT/run_i.log
echo "### project commit $(cat COMMIT)" > "$L"
nvidia-smi -L >> "$L"
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
s=$SECONDS
timeout 420 python3 -m calibration --base $HW --device-time --no-comm --devices 1 \
  --dtypes Float32 --measure-only --families bmm bmm_nt bmm_tn --seed 1 \
  -o $OUT/$HW-graph-bmm-s1.json >> "$L" 2>&1
echo "### bmm rc $? after $((SECONDS - s)) s" >> "$L"
grep "###\|rror\|configurations\|shapes$" "$L" | tail
