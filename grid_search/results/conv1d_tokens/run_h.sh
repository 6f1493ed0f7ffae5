#!/bin/bash
# 1 GPU (1 x H200 here). A third sample of float32 products off the calibration grid
# (--off-grid --seed 2: 300 plain products, 64 per weight-gradient layout), device time,
# measurements only, packed in one archive.
# Run from the project root, $OUT set, COMMIT holding the commit.
set -u
L=$OUT/run_h.log
echo "### project commit $(cat COMMIT)" > "$L"
nvidia-smi -L >> "$L"
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
C="python3 -m calibration --base $HW --device-time --no-comm --devices 1 --measure-only --dtypes Float32 --off-grid --seed 2"
M=/tmp/mm; mkdir -p $M
timeout -s INT 80 $C -o $M/$HW-graph-offgrid-s2.json --families matmul --shapes 300 >> "$L" 2>&1
echo "### products off the grid rc $? after $SECONDS s" >> "$L"
timeout -s INT 70 $C -o $M/$HW-graph-layouts-offgrid-s2.json --families matmul_tn matmul_nt >> "$L" 2>&1
echo "### layouts off the grid rc $? after $SECONDS s" >> "$L"
(cd $M && tar czf $OUT/offgrid.tgz ./*.csv)
grep "###" "$L"
