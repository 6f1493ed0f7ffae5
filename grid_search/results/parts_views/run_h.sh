#!/bin/bash
# 1 GPU (1 x H200 here). One-GPU training steps traced per op (eager,
# calibration.memory_trace) against the liveness model of parts and maybe-views: the models
# and batch sizes of ../elementwise_order/ calls C and D, and four it checked under a cap
# (GPT-NeoX, PoolFormer, PVT-v2, SEW-D). Adam, float32. Run from the project root, $OUT
# set, COMMIT holding the commit.
set -u
L=$OUT/run_h.log
echo "### project commit $(cat COMMIT)" > "$L"
nvidia-smi -L >> "$L"
S=/tmp/nv; mkdir -p $S $S/csv
s=$SECONDS
export PYTHONPATH=$PWD:${PYTHONPATH:-}
R=grid_search/results
ex() { timeout 240 python3 $R/$1/export.py $2 $S/$2.onnx > $S/x_$2.log 2>&1; }
(ex norms_views hiera & ex channels_last swinv2 & ex zoo_sealed4 segformer &
 ex zoo_sealed4 mobilenetv3 & ex adam_step convbert & ex conv1d_tokens conformer &
 ex zoo_sealed3 neox & ex channels_last poolformer & ex channels_last pvt_v2 &
 ex index_adam sewd & ex norms_views deberta & ex adam_step squeezebert & wait)
tail -qn1 $S/x_*.log >> "$L"
echo "### exports after $((SECONDS - s)) s" >> "$L"
trace() {  # name model batch loss dims...
  local name=$1 model=$2 b=$3 loss=$4; shift 4
  timeout 150 torchrun --nproc_per_node 1 -m calibration.memory_trace measure \
    --model $S/$model.onnx --dim batch=$b "$@" --train --loss $loss --optimizer adam \
    --batch-size $b --config 1,1,1,1 --hardware h200-sxm --backend nccl \
    -o $S/csv/$name.csv >> "$L" 2>&1
  echo "### memory_trace $name rc $? after $((SECONDS - s)) s" >> "$L"
  python3 -m calibration.memory_trace report $S/csv/$name.csv 2>&1 | head -3 >> $OUT/reports.txt
}
trace hiera.b64 hiera 64 cross_entropy
trace swinv2.b64 swinv2 64 cross_entropy
trace segformer.b64 segformer 64 cross_entropy
trace mobilenetv3.b128 mobilenetv3 128 cross_entropy
trace convbert.b16 convbert 16 mse --dim seq=512
trace conformer.b8 conformer 8 mse
trace neox.b8 neox 8 mse --dim seq=512
trace poolformer.b64 poolformer 64 cross_entropy
trace pvt_v2.b128 pvt_v2 128 cross_entropy
trace sewd.b8 sewd 8 mse
trace deberta.b8 deberta 8 mse --dim seq=512
trace squeezebert.b16 squeezebert 16 mse --dim seq=512
(cd $S/csv && tar cJf $OUT/traces.tar.xz *.csv)
grep "###\|rror" "$L" | tail -16; grep "^rank" $OUT/reports.txt
