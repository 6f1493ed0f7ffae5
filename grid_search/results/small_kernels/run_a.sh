#!/bin/bash
# For a later session (not run yet), one GPU of either kind: the backend's index_add for an
# adding ScatterND of one index row (`scatter_add_few`, calibration.bench_train: a table of 3
# or 16 long rows, as nn.MultiheadAttention's query / key / value gradients), and the small
# bias-gradient reductions and Adam updates beside it, timed by their device time, float32
# and bfloat16, measured only. ViT-B/16's replayed P2 x K8 (../zoo_more_2gpu/call_e/) ran
# its few-row scatters 2.9x their copy price, its `ReduceSum`s 1.9x and Adam 1.5x their
# fits. Fit here (`python -m calibration --fit-only OUT.measurements.csv -o F.json --base
# h200-sxm`) and splice `scatter_add_few` (the others only if their held-out errors drop).
# Run from the project root, $OUT set.
set -u
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
L=$OUT/run_a.log
echo "### project commit $(cat COMMIT), card $HW" > $L
nvidia-smi -L >> $L
timeout -s INT 240 python3 -m calibration -o $OUT/$HW-graph-small.json --name $HW-graph-small \
    --base $HW --device-time --no-comm --devices 1 --measure-only \
    --families scatter_add_few reduce adam --dtypes Float32 BFloat16 >> $L 2>&1
echo "### calibration rc $? after $SECONDS s" >> $L
grep "###\|measurements\|rror" $L | tail -10
