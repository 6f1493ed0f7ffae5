#!/bin/bash
# 2 GPUs of either kind, after run_b: RegNet's grouped 3 x 3 convolutions of 64 channels per
# group were still priced at up to 4.8x their time (../zoo_sealed4/call_b): the grouped
# sample had few shapes of few groups of many channels. A third sample of 240 shapes
# (--seed 2) drawn as calibration.bench_train.grouped_conv_shapes now draws them (half
# depthwise, the rest 4 to 128 channels per group), float32, on GPU 0, measured only.
# Run from the project root, $OUT set.
set -u
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
L=$OUT/run_c.log
echo "### project commit $(cat COMMIT), card $HW" > $L
CUDA_VISIBLE_DEVICES=0 timeout -s INT 200 python3 -m calibration --base $HW --device-time \
    --no-comm --devices 1 --measure-only -o $OUT/$HW-graph-grouped-s2.json \
    --name $HW-graph-grouped-s2 --seed 2 \
    --families conv_grouped conv_grouped_dgrad conv_grouped_wgrad --dtypes Float32 >> $L 2>&1
echo "### done after $SECONDS s" >> $L
tail -5 $L
