#!/bin/bash
# One GPU: the float32 products measured off the calibration grid (`--off-grid`: every
# dimension any multiple of 8, widths of the layer layouts any multiple of 64), timed by
# their device time as a replayed step runs them, measured only; fitted elsewhere, pooled
# with the device-time profile's own measurements.
# Run from the project root, $OUT set.
set -u
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
echo "### project commit $(cat COMMIT), card $HW" > $OUT/run_a.log
nvidia-smi -L >> $OUT/run_a.log
timeout -s INT 330 python3 -m calibration -o $OUT/$HW-graph-offgrid.json \
    --name $HW-graph-offgrid --base $HW --device-time --no-comm --devices 1 --measure-only \
    --families matmul matmul_nt matmul_tn --dtypes Float32 --off-grid --shapes 200 \
    >> $OUT/run_a.log 2>&1
echo "### calibration rc $? after $SECONDS s" >> $OUT/run_a.log
grep "###\|shapes\|wrote\|GPU-minutes\|rror" $OUT/run_a.log | tail -20
