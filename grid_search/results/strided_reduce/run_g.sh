#!/bin/bash
# 1 GPU (1 x H200 here). (1) unfold_probe.py: ConvBERT's unfold products alone; (2) the
# batched product families (bmm, and bmm_nt / bmm_tn with the rest of bench_matmul_grad's
# families) with small products in many batches added, float32, device time,
# measurements only. Run from the project root, $OUT set, COMMIT holding the commit.
set -u
L=$OUT/run_g.log
echo "### project commit $(cat COMMIT)" > "$L"
nvidia-smi -L >> "$L"
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
s=$SECONDS
timeout 100 python3 grid_search/results/strided_reduce/unfold_probe.py > $OUT/unfold_probe.txt 2>> "$L"
echo "### probe rc $? after $((SECONDS - s)) s" >> "$L"
timeout 420 python3 -m calibration --base $HW --device-time --no-comm --devices 1 \
  --dtypes Float32 --measure-only --families bmm bmm_nt bmm_tn \
  -o $OUT/$HW-graph-bmm.json >> "$L" 2>&1
echo "### bmm rc $? after $((SECONDS - s)) s" >> "$L"
grep "###\|rror\|configurations\|shapes$" "$L" | tail; cat $OUT/unfold_probe.txt
