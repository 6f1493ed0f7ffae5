#!/bin/bash
# 2 GPUs (2 x H200 here). (1) GPU 0: the `groupnorm` family (instance and group norms by
# the backend's fused F.group_norm), float32, device time, measurements only (fitted off
# the device); GPU 1 meanwhile: the instance norm's lowering before and after, side by
# side (norm_lowering.py). (2) **Sealed** (written to $OUT/sealed.tgz only, printed
# nowhere): HF BiT-R50x1 (dynamo; group norms, weight-standardized convolutions) at 64 and
# 128 images, HF LeViT-128S (dynamo) at 128 and 256 images, float32 training steps (cross
# entropy, Adam), every configuration of <= 2 GPUs replayed; the skeletons of the
# exports. Open the archive only after the comparison's commit is named in the README.
# Run from the project root, $OUT set, COMMIT holding the commit.
R=grid_search/results/norms_views
source grid_search/results/sealed_lib.sh
sealed_begin run_a 2 20
mkdir -p $OUT/cal
s=$SECONDS
(sealed_export bit $R/export.py; sealed_export levit $R/export.py) &
CUDA_VISIBLE_DEVICES=0 timeout 200 python3 -m calibration -o $OUT/cal/$HW-graph-groupnorm.json \
  --base $HW --device-time --no-comm --devices 1 --dtypes Float32 \
  --families groupnorm --measure-only >> "$L" 2>&1 &
CUDA_VISIBLE_DEVICES=1 timeout 100 python3 $R/norm_lowering.py --batch 128 > $OUT/norm_lowering.txt 2>> "$L"
echo "### norm_lowering rc $? after $((SECONDS - s)) s" >> "$L"
wait
echo "### groupnorm family and exports done after $((SECONDS - s)) s" >> "$L"
sealed_search bit_b64_graph 130 --model $S/bit.onnx --dim batch=64 $IMG
sealed_search bit_b128_graph 150 --model $S/bit.onnx --dim batch=128 $IMG
sealed_search levit_b128_graph 90 --model $S/levit.onnx --dim batch=128 $IMG
sealed_search levit_b256_graph 100 --model $S/levit.onnx --dim batch=256 $IMG
sealed_end
cat $OUT/norm_lowering.txt >> "$L"
grep "###\|rror" "$L" | tail -20
