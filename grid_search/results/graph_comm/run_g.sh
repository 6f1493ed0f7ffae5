#!/bin/bash
# 1 GPU (1 x H200 here), after PoolFormer-S12's sealed comparison (call_f/, every row
# 10-20% too fast): its one-GPU training step explained at 128 images (replayed, float32,
# Adam). Run from the project root, $OUT set, COMMIT holding the commit.
set -u
L=$OUT/run_g.log
echo "### project commit $(cat COMMIT)" > "$L"
nvidia-smi -L >> "$L"
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
S=/tmp/pf; W=/tmp/pf/e; mkdir -p $S $W
PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 150 python3 grid_search/results/channels_last/export.py \
  poolformer $S/poolformer.onnx >> "$L" 2>&1
E="python3 -m grid_search.study explain --hardware $HW-graph --cuda-graph --steps 10 --warmup 3 --top 40 --train --optimizer adam --loss cross_entropy"
s=$SECONDS
timeout -s INT -k 10 120 $E --model $S/poolformer.onnx --dim batch=128 --batch-size 128 \
  -o $W/poolformer_1_b128 > /dev/null 2>> "$L"
echo "### poolformer_1_b128 rc $? after $((SECONDS - s)) s" >> "$L"
(cd $W && XZ_OPT="-9 -T0" tar cJf $OUT/traces.txz */prof */prof_replay */program.dir */program.npz */explain.txt) \
    >> "$L" 2>&1
for f in $W/*/explain.txt; do echo "## $f"; head -60 "$f"; done > $OUT/explains.txt
grep "###\|rror" "$L" | tail -8; grep -h "step:\|^## " $OUT/explains.txt
