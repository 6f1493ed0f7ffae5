#!/bin/bash
# For a later session (not run yet), one GPU of either kind: the grouped convolutions
# (`conv_grouped`, `conv_grouped_dgrad`, `conv_grouped_wgrad`: depthwise and ResNeXt-like,
# calibration.bench_train.grouped_conv_shapes) timed by their device time, float32,
# measured only (fit here: pool with the device-time calibration's CSV, then
# `python -m calibration.splice ... --families conv_grouped conv_grouped_dgrad
# conv_grouped_wgrad --from ...`); then EfficientNet-B0's one-GPU step at batch 64 run
# eagerly with every op marked and replayed, to explain against the profile with the new
# fits (`distir explain` here, on the returned traces, after the splice).
# Run from the project root, $OUT set.
set -u
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
L=$OUT/run_a.log
echo "### project commit $(cat COMMIT), card $HW" > $L
nvidia-smi -L >> $L
S=/tmp/zoo; W=/tmp/zoo/x; mkdir -p $S $W
(PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 60 python3 grid_search/results/zoo_more_2gpu/export.py \
    efficientnet $S/efficientnet.onnx >> $L 2>&1) &
timeout -s INT 300 python3 -m calibration -o $OUT/$HW-graph-grouped.json \
    --name $HW-graph-grouped --base $HW --device-time --no-comm --devices 1 --measure-only \
    --families conv_grouped conv_grouped_dgrad conv_grouped_wgrad --dtypes Float32 >> $L 2>&1
echo "### calibration rc $? after $SECONDS s" >> $L
wait
D="python3 -m distir"
timeout 90 $D import $S/efficientnet.onnx --dim batch=64 --train --loss cross_entropy \
    --optimizer sgd -o $W/eff.dir >> $L 2>&1
timeout -s INT -k 10 60 $D run $W/eff.dir --profile $OUT/eff.eager >> $L 2>&1
timeout -s INT -k 10 60 $D run $W/eff.dir --cuda-graph --profile $OUT/eff.graph >> $L 2>&1
cp $W/eff.dir $OUT/
(cd $OUT && tar czf traces.tgz eff.eager eff.graph eff.dir && rm -rf eff.eager eff.graph eff.dir)
echo "### done after $SECONDS s" >> $L
grep "###\|grouped\|rror" $L | tail -20
