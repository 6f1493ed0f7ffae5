#!/bin/bash
# For a later session (not run yet), one GPU of either kind: the weight-gradient layouts
# (matmul_tn, matmul_nt) in float32 over rows 2^8 to 2^16, on the grid and off it, timed by
# their device time, measured only. Until 2026-11-28 their sweep started at 2^11 rows, and
# the fits extrapolated below it (1.1-1.55x the plain product at 512 rows, a pipeline's
# microbatch of one 512-token sequence: held-out LLaMA's and T5's P2 x K8 at batch 8 were
# predicted 13-16% too slow). Fit here, pooled with the device-time calibration's CSV and
# this folder's, then splice matmul_tn matmul_nt --dtypes Float32 (README.md's commands).
# On an H100, also the float32 products off the grid for h100-sxm-graph (run_a.sh's).
# Run from the project root, $OUT set.
set -u
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
L=$OUT/run_b.log
echo "### project commit $(cat COMMIT), card $HW" > $L
C="python3 -m calibration --base $HW --device-time --no-comm --devices 1 --measure-only --dtypes Float32"
timeout -s INT 200 $C -o $OUT/$HW-graph-layouts.json --name $HW-graph-layouts \
    --families matmul_tn matmul_nt >> $L 2>&1
echo "### layouts rc $? after $SECONDS s" >> $L
timeout -s INT 200 $C -o $OUT/$HW-graph-layouts-offgrid.json --name $HW-graph-layouts-offgrid \
    --families matmul_tn matmul_nt --off-grid >> $L 2>&1
echo "### layouts off the grid rc $? after $SECONDS s" >> $L
if [ $HW = h100-sxm ]; then
  timeout -s INT 150 $C -o $OUT/$HW-graph-offgrid.json --name $HW-graph-offgrid \
      --families matmul --off-grid --shapes 300 >> $L 2>&1
  echo "### products off the grid rc $? after $SECONDS s" >> $L
fi
grep "###\|shapes\|rror" $L | tail -20
