#!/bin/bash
# 1 GPU (1 x H200 here). transient_probe.py, then PoolFormer-S12's one-GPU step traced
# per op again (as call H) with its pools made one ATen call. Run from the project root,
# $OUT set, COMMIT holding the commit.
set -u
L=$OUT/run_k.log
echo "### project commit $(cat COMMIT)" > "$L"
nvidia-smi -L >> "$L"
S=/tmp/nv; mkdir -p $S
s=$SECONDS
export PYTHONPATH=$PWD:${PYTHONPATH:-}
R=grid_search/results
timeout 240 python3 $R/channels_last/export.py poolformer $S/poolformer.onnx > $S/x.log 2>&1 &
timeout 200 python3 $R/parts_views/transient_probe.py > $OUT/transient_probe.txt 2>> "$L"
echo "### probe rc $? after $((SECONDS - s)) s" >> "$L"
wait
tail -n1 $S/x.log >> "$L"
timeout 150 torchrun --nproc_per_node 1 -m calibration.memory_trace measure \
  --model $S/poolformer.onnx --dim batch=64 --train --loss cross_entropy --optimizer adam \
  --batch-size 64 --config 1,1,1,1 --hardware h200-sxm --backend nccl \
  -o $S/poolformer.b64.csv >> "$L" 2>&1
echo "### memory_trace rc $? after $((SECONDS - s)) s" >> "$L"
python3 -m calibration.memory_trace report $S/poolformer.b64.csv 2>&1 | head -3 > $OUT/report.txt
xz -9c $S/poolformer.b64.csv > $OUT/poolformer.b64.csv.xz
grep "###\|rror" "$L" | tail -8; cat $OUT/transient_probe.txt $OUT/report.txt
