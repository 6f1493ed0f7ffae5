#!/bin/bash
# One-GPU training steps of 14 models run on the CPU (gloo) and traced per op by
# calibration.memory_trace, whose CPU clock counts the distinct storages the live tensors
# hold: what the liveness models, without an allocator. Small batches (CPU time).
#   bash cpu_traces.sh ROOT TAG     # ROOT: a checkout of the project; traces in $W/TAG/
# Exports are cached in $W/onnx ($W defaults to /tmp/pv).
set -u
ROOT=$1; TAG=$2; W=${W:-/tmp/pv}
PY=${PY:-python3}
R=$ROOT/grid_search/results
mkdir -p $W/onnx $W/$TAG
exp() { [ -f $W/onnx/$2.onnx ] || timeout 600 $PY $R/$1/export.py $2 $W/onnx/$2.onnx \
          > $W/onnx/$2.log 2>&1; }
tr() {  # name batch loss extra...
  local n=$1 b=$2 loss=$3; shift 3
  (cd $ROOT && PYTHONPATH=$ROOT timeout 900 $PY -m torch.distributed.run --nproc_per_node 1 \
     -m calibration.memory_trace measure --model $W/onnx/$n.onnx --dim batch=$b "$@" \
     --train --loss $loss --optimizer adam --batch-size $b --config 1,1,1,1 --backend gloo \
     -o $W/$TAG/$n.csv > $W/$TAG/$n.log 2>&1)
  echo "$n $(grep '^rank 0' $W/$TAG/$n.log | head -1)"
}
exp norms_views hiera; exp norms_views deberta; exp adam_step squeezebert
exp adam_step convbert; exp zoo_sealed4 qwen2; exp zoo_sealed3 neox; exp zoo_sealed3 opt
exp adam_step dinov2; exp adam_step beit; exp index_adam sewd; exp index_adam wavlm
exp conv1d_tokens conformer; exp zoo_sealed4 segformer; exp norms_views levit
tr hiera 16 cross_entropy
tr deberta 2 mse --dim seq=256
tr squeezebert 2 mse --dim seq=256
tr convbert 2 mse --dim seq=256
tr qwen2 2 mse --dim seq=256
tr neox 2 mse --dim seq=256
tr opt 2 mse --dim seq=256
tr dinov2 4 cross_entropy
tr beit 2 cross_entropy
tr sewd 2 mse
tr wavlm 2 mse
tr conformer 2 mse
tr segformer 8 cross_entropy
tr levit 8 cross_entropy
