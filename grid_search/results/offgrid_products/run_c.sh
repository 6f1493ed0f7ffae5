#!/bin/bash
# One H100 (asked for as nvidia-h100-x1): run_b.sh (the layouts from 256 rows, on the grid
# and off it, and the float32 products off the grid, for h100-sxm-graph), then the grouped
# convolutions of ../grouped_conv/run_a.sh's calibration (without its EfficientNet step).
# Run from the project root, $OUT set.
set -u
bash grid_search/results/offgrid_products/run_b.sh
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
timeout -s INT 200 python3 -m calibration -o $OUT/$HW-graph-grouped.json \
    --name $HW-graph-grouped --base $HW --device-time --no-comm --devices 1 --measure-only \
    --families conv_grouped conv_grouped_dgrad conv_grouped_wgrad --dtypes Float32 >> $OUT/run_c.log 2>&1
echo "### grouped rc $? after $SECONDS s" >> $OUT/run_c.log
tail -3 $OUT/run_c.log
