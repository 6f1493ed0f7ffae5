#!/bin/bash
# 1 GPU (1 x H200 here). Out of memory under a cap as in calls E and F (run_e.sh), with the
# session's final code, on six more models it did not look at: MobileNetV2, FocalNet-T,
# MobileViT-XXS, PoolFormer-S12 and ConvNeXt-V2 atto (cross-entropy), SEW-D (4 s clips, MSE). Eager,
# float32, Adam; at most 2 batch sizes each. Run from the project root, $OUT set, COMMIT
# holding the commit.
set -u
L=$OUT/run_g.log
echo "### project commit $(cat COMMIT)" > "$L"
nvidia-smi -L >> "$L"
S=/tmp/nv; mkdir -p $S
s=$SECONDS
export PYTHONPATH=$PWD:${PYTHONPATH:-}
R=grid_search/results
(timeout 200 python3 $R/zoo_sealed3/export.py mobilenet $S/mobilenet.onnx > $S/x1.log 2>&1 &
 timeout 200 python3 $R/channels_last/export.py focalnet $S/focalnet.onnx > $S/x2.log 2>&1 &
 timeout 200 python3 $R/channels_last/export.py mobilevit $S/mobilevit.onnx > $S/x3.log 2>&1 &
 timeout 200 python3 $R/channels_last/export.py poolformer $S/poolformer.onnx > $S/x4.log 2>&1 &
 timeout 200 python3 $R/channels_last/export.py convnextv2 $S/convnextv2.onnx > $S/x5.log 2>&1 &
 timeout 200 python3 $R/index_adam/export.py sewd $S/sewd.onnx > $S/x6.log 2>&1 & wait)
cat $S/x*.log >> "$L"
echo "### exports after $((SECONDS - s)) s" >> "$L"
check() {  # name model "batch sizes" options...
  local name=$1 model=$2 batches=$3; shift 3
  cap=$(timeout 120 python3 $R/elementwise_order/pick_cap.py --model $S/$model.onnx "$@" \
        --batch-sizes $batches 2>> "$L")
  echo "### $name cap $cap after $((SECONDS - s)) s" >> "$L"
  timeout 200 python3 -m grid_search.study measure --model $S/$model.onnx "$@" \
    --batch-sizes $batches --max-devices 1 --max-microbatches 1 --memory-check \
    --memory-limit $cap --margin 0.2 --max-configs 2 --hardware h200-sxm --steps 1 \
    --warmup 1 -o $OUT/$name.csv >> "$L" 2>&1
  echo "### $name rc $? after $((SECONDS - s)) s" >> "$L"
}
IMG="--train --loss cross_entropy --optimizer adam"
TOK="--dim seq=512 --train --loss mse --optimizer adam"
check mobilenet mobilenet "64 96 128 160 192 224 256" $IMG
check focalnet focalnet "32 48 64 80 96 112 128" $IMG
check mobilevit mobilevit "64 96 128 160 192 224 256" $IMG
check poolformer poolformer "32 48 64 80 96 112 128" $IMG
check convnextv2 convnextv2 "64 96 128 160 192 224 256" $IMG
check sewd sewd "4 6 8 10 12 14 16" --train --loss mse --optimizer adam
grep "###\|rror\|measured D" "$L" | tail -40
