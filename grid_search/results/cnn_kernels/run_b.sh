#!/bin/bash
# 2 GPUs of either kind, after ../zoo_sealed4/call_b's explains: SegFormer's layer norms
# over 32 and 64 channels (below run_a's widths: its LayerNormalization ran 2.2x, its
# gradient 1.7x their price) and RegNet's grouped convolutions (its ConvGrad 37% under its
# price at batch 128). The layer norms and their gradients again at every width, 32 to
# 8192 (float32 on GPU 0, bfloat16 on GPU 1), then a second random sample of 240 grouped
# convolution shapes (--seed 1, float32, GPU 1), measured only, device time.
# Run from the project root, $OUT set.
set -u
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
L=$OUT/run_b.log
echo "### project commit $(cat COMMIT), card $HW" > $L
C="python3 -m calibration --base $HW --device-time --no-comm --devices 1 --measure-only"
CUDA_VISIBLE_DEVICES=0 timeout -s INT 200 $C -o $OUT/$HW-graph-ln-Float32.json \
    --name $HW-graph-ln --families layernorm layernorm_grad --dtypes Float32 \
    > $OUT/run_b.ln32.log 2>&1 &
(CUDA_VISIBLE_DEVICES=1 timeout -s INT 100 $C -o $OUT/$HW-graph-ln-BFloat16.json \
    --name $HW-graph-ln --families layernorm layernorm_grad --dtypes BFloat16 \
    > $OUT/run_b.ln16.log 2>&1
 CUDA_VISIBLE_DEVICES=1 timeout -s INT 200 $C -o $OUT/$HW-graph-grouped-s1.json \
    --name $HW-graph-grouped-s1 --seed 1 \
    --families conv_grouped conv_grouped_dgrad conv_grouped_wgrad --dtypes Float32 \
    > $OUT/run_b.grouped.log 2>&1) &
wait
echo "### done after $SECONDS s" >> $L
grep -h "measurements\|rror\|device time" $OUT/run_b.*.log >> $L
tail -12 $L
