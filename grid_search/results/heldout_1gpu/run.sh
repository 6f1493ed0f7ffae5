#!/bin/bash
# 1 GPU (1 x H200 here). Held-out one-GPU training steps (Adam, float32, replayed as CUDA
# graphs, on the models' own weights) of models no cost-model work has looked at, each at
# two batch sizes: `bash run.sh a` (token models, 512 tokens, MSE against the hidden
# states) or `bash run.sh b` (image models, cross-entropy over 1000 classes; AST and
# Whisper's encoder, MSE). Exports in parallel first (export.py, their skeletons to
# $OUT/skel.tgz), then `study measure` of each model in turn, simulated on the profile
# calibrated for replayed steps. Run from the project root, $OUT set, COMMIT holding the
# commit.
set -u
R=grid_search/results/heldout_1gpu
L=$OUT/run_$1.log
echo "### project commit $(cat COMMIT)" > "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
echo "### profile $HW-graph" >> "$L"
export PYTHONPATH=$PWD:${PYTHONPATH:-} NCCL_NVLS_ENABLE=0
S=/tmp/heldout_models; mkdir -p $S $OUT/skel $OUT/rows
TOK="--dim seq=512 --train --loss mse --optimizer adam"
IMG="--train --loss cross_entropy --optimizer adam"
AUD="--train --loss mse --optimizer adam"
case $1 in
  a) LIST="distilbert:8,16:TOK electra:16,32:TOK roformer:8,16:TOK mpnet:8,16:TOK
           bloom:8,16:TOK phi:8,16:TOK gemma:8,16:TOK falcon:8,16:TOK gpt_neo:8,16:TOK
           modernbert:8,16:TOK" ;;
  b) LIST="swiftformer:64,128:IMG pvt:64,128:IMG clip_vision:64,128:IMG
           textnet:64,128:IMG hgnetv2:64,128:IMG ast:4,8:AUD whisper:8,16:AUD" ;;
esac
s=$SECONDS
for item in $LIST; do
  n=${item%%:*}
  timeout 240 python3 $R/export.py $n $S/$n.onnx > $S/$n.export.log 2>&1 &
  while [ "$(jobs -r | wc -l)" -ge 6 ]; do sleep 1; done
done
wait
for item in $LIST; do
  n=${item%%:*}; tail -n 1 $S/$n.export.log >> "$L"
  python3 -m grid_search.skeleton strip $S/$n.onnx $OUT/skel/$n.skel.onnx >> "$L" 2>&1
done
echo "### exports after $((SECONDS - s)) s" >> "$L"
for item in $LIST; do
  n=${item%%:*}; rest=${item#*:}; b=${rest%%:*}; opts=${rest#*:}
  timeout 200 python3 -m grid_search.study measure --model $S/$n.onnx ${!opts} \
    --batch-sizes ${b//,/ } --max-devices 1 --max-microbatches 1 --cuda-graph \
    --hardware $HW-graph -o $OUT/rows/$n.csv >> $OUT/rows/measure.log 2>&1
  echo "### $n rc $? after $((SECONDS - s)) s" >> "$L"
done
(cd $OUT && tar czf skel_$1.tgz skel && rm -rf skel && tar czf rows_$1.tgz rows && rm -rf rows)
uptime >> "$L"
grep "###\|rror" "$L" | tail -30
