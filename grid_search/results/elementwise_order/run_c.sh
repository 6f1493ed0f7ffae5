#!/bin/bash
# 1 GPU (1 x H200 here). Call B's memory traces again with calibration.memory_trace's model
# made the simulator's (views as their storage, kernels' temporaries): SqueezeBERT at
# 16 x 512 (MSE, Adam), SegFormer MiT-b0 at 64 images and MobileNetV3-Small at 128
# (cross-entropy, Adam), DeBERTa-v2 (v3-base sizes) at 8 x 512 (MSE, Adam), eager, one
# GPU. Run from the project root, $OUT set, COMMIT holding the commit.
set -u
L=$OUT/run_c.log
echo "### project commit $(cat COMMIT)" > "$L"
nvidia-smi -L >> "$L"
S=/tmp/nv; mkdir -p $S
s=$SECONDS
export PYTHONPATH=$PWD:${PYTHONPATH:-}
(timeout 150 python3 grid_search/results/adam_step/export.py squeezebert $S/squeezebert.onnx \
   > $S/x1.log 2>&1 &
 timeout 150 python3 grid_search/results/zoo_sealed4/export.py segformer $S/segformer.onnx \
   > $S/x2.log 2>&1 &
 timeout 150 python3 grid_search/results/zoo_sealed4/export.py mobilenetv3 $S/mobilenetv3.onnx \
   > $S/x3.log 2>&1 &
 timeout 150 python3 grid_search/results/norms_views/export.py deberta_dynamo $S/deberta.onnx \
   > $S/x4.log 2>&1 & wait)
cat $S/x*.log >> "$L"
echo "### exports after $((SECONDS - s)) s" >> "$L"
trace() {  # name model batch loss dims...
  local name=$1 model=$2 b=$3 loss=$4; shift 4
  timeout 150 torchrun --nproc_per_node 1 -m calibration.memory_trace measure \
    --model $S/$model.onnx --dim batch=$b "$@" --train --loss $loss --optimizer adam \
    --batch-size $b --config 1,1,1,1 --backend nccl -o $OUT/$name.csv >> "$L" 2>&1
  echo "### memory_trace $name rc $? after $((SECONDS - s)) s" >> "$L"
  python3 -m calibration.memory_trace report $OUT/$name.csv 2>&1 | head -14 >> $OUT/reports.txt
  xz -9 $OUT/$name.csv
}
trace squeezebert.b16 squeezebert 16 mse --dim seq=512
trace segformer.b64 segformer 64 cross_entropy
trace mobilenetv3.b128 mobilenetv3 128 cross_entropy
trace deberta.b8 deberta 8 mse --dim seq=512
grep "###\|rror" "$L" | tail -8; cat $OUT/reports.txt
