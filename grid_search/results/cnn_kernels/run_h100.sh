#!/bin/bash
# For a later session (not run yet), 2 GPUs, meant for H100s (`h100-sxm-graph` has none of
# this folder's families): calls A, B and C of this folder in one: float32 on GPU 0,
# bfloat16 on GPU 1, the layer norms (32 to 8192 channels), copies, reductions, Where, Pad
# and cold Adam; then two grouped-convolution samples (seeds 1 and 2) in float32, one per
# GPU; then (added 2026-11-28, after ../channels_last/) the channels-last convolutions,
# dense on GPU 0 (with the dense NCHW ones again, seed 3: their sample now holds patch
# embeddings) and grouped on GPU 1. Measured only (about 6 minutes); fit and splice here as
# README.md and ../channels_last/README.md did for the H200, with `--base h100-sxm` and
# `../offgrid_products/h100/h100-sxm-graph-grouped.measurements.csv` as the seed-0 sample.
# Run from the project root, $OUT set.
set -u
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
L=$OUT/run_h100.log
echo "### project commit $(cat COMMIT), card $HW" > $L
nvidia-smi -L >> $L
C="python3 -m calibration --base $HW --device-time --no-comm --devices 1 --measure-only"
i=0
for dt in Float32 BFloat16; do
  (CUDA_VISIBLE_DEVICES=$i timeout -s INT 200 $C -o $OUT/$HW-graph-cnn-$dt.json \
      --name $HW-graph-cnn --families layernorm layernorm_grad reduce copy where pad adam \
      --dtypes $dt > $OUT/run_h100.$dt.log 2>&1
   CUDA_VISIBLE_DEVICES=$i timeout -s INT 150 $C -o $OUT/$HW-graph-grouped-s$((i + 1)).json \
      --name $HW-graph-grouped-s$((i + 1)) --seed $((i + 1)) \
      --families conv_grouped conv_grouped_dgrad conv_grouped_wgrad --dtypes Float32 \
      > $OUT/run_h100.grouped$((i + 1)).log 2>&1
   if [ $i = 0 ]; then
     fams="conv conv_dgrad conv_wgrad conv_nhwc conv_nhwc_dgrad conv_nhwc_wgrad"
   else
     fams="conv_grouped_nhwc conv_grouped_nhwc_dgrad conv_grouped_nhwc_wgrad"
   fi
   CUDA_VISIBLE_DEVICES=$i timeout -s INT 240 $C -o $OUT/$HW-graph-nhwc$i.json \
      --name $HW-graph-nhwc$i --seed 3 --families $fams --dtypes Float32 \
      > $OUT/run_h100.nhwc$i.log 2>&1) &
  i=$((i + 1))
done
wait
echo "### done after $SECONDS s" >> $L
grep -h "measurements\|rror\|device time" $OUT/run_h100.*.log >> $L
tail -12 $L
