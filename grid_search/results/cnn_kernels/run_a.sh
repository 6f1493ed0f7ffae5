#!/bin/bash
# 2 GPUs of either kind: the memory-bound kernels that ../zoo_sealed3/call_b's explains of
# ConvNeXt-T and MobileNetV2 found priced too fast, measured through the backend's
# lowerings by their device time (--device-time), float32 on GPU 0 and bfloat16 on GPU 1
# at once: layer norms and their gradients over 96 to 8192 channels, sum reductions (rows,
# and a convolution's bias gradient over [N, C, pixels]), layout copies of image batches
# (NCHW <-> NHWC) beside the attention heads' copies, a constant Pad of one pixel, a
# ReLU6 gradient's Where, and Adam with the L2 cache flushed before each call
# (calibration.bench_train.COLD); training sizes from 2^8 elements. Measured only; fitted
# and spliced here (README.md). Run from the project root, $OUT set.
set -u
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
L=$OUT/run_a.log
echo "### project commit $(cat COMMIT), card $HW" > $L
nvidia-smi -L >> $L
i=0
for dt in Float32 BFloat16; do
  CUDA_VISIBLE_DEVICES=$i timeout -s INT 500 python3 -m calibration -o $OUT/$HW-graph-cnn-$dt.json \
      --name $HW-graph-cnn --base $HW --device-time --no-comm --devices 1 --measure-only \
      --families layernorm layernorm_grad reduce copy where pad adam --dtypes $dt \
      > $OUT/run_a.$dt.log 2>&1 &
  i=$((i + 1))
done
wait
echo "### calibrations done after $SECONDS s" >> $L
grep -h "measurements\|rror\|device time" $OUT/run_a.*.log >> $L
tail -12 $L
