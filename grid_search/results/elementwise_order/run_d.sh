#!/bin/bash
# 1 GPU (1 x H200 here). More one-GPU training steps traced per op (eager,
# calibration.memory_trace) against the liveness model with views: Hiera-B and Swin-V2-T
# at 64 images, DINOv2 ViT-B/14 at 32 (cross-entropy, Adam), ConvBERT-base at 16 x 512,
# wav2vec 2.0-Conformer at 8 clips, Qwen2 12 x 768 at 8 x 512 (MSE, Adam). Run from the
# project root, $OUT set, COMMIT holding the commit.
set -u
L=$OUT/run_d.log
echo "### project commit $(cat COMMIT)" > "$L"
nvidia-smi -L >> "$L"
S=/tmp/nv; mkdir -p $S
s=$SECONDS
export PYTHONPATH=$PWD:${PYTHONPATH:-}
R=grid_search/results
(timeout 200 python3 $R/norms_views/export.py hiera $S/hiera.onnx > $S/x1.log 2>&1 &
 timeout 200 python3 $R/channels_last/export.py swinv2 $S/swinv2.onnx > $S/x2.log 2>&1 &
 timeout 200 python3 $R/adam_step/export.py dinov2 $S/dinov2.onnx > $S/x3.log 2>&1 &
 timeout 200 python3 $R/adam_step/export.py convbert $S/convbert.onnx > $S/x4.log 2>&1 &
 timeout 200 python3 $R/conv1d_tokens/export.py conformer $S/conformer.onnx > $S/x5.log 2>&1 &
 timeout 200 python3 $R/zoo_sealed4/export.py qwen2 $S/qwen2.onnx > $S/x6.log 2>&1 & wait)
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
trace hiera.b64 hiera 64 cross_entropy
trace swinv2.b64 swinv2 64 cross_entropy
trace dinov2.b32 dinov2 32 cross_entropy
trace convbert.b16 convbert 16 mse --dim seq=512
trace conformer.b8 conformer 8 mse
trace qwen2.b8 qwen2 8 mse --dim seq=512
grep "###\|rror" "$L" | tail -10; grep "^rank" $OUT/reports.txt
