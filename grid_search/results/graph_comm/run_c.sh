#!/bin/bash
# 1 GPU (1 x H200 here), after Swin-T's sealed comparison (call_b/, every row too slow,
# the one-GPU step most): its one-GPU training step explained at 128 and 64 images
# (replayed, float32, Adam). Run from the project root, $OUT set, COMMIT holding the commit.
set -u
L=$OUT/run_c.log
echo "### project commit $(cat COMMIT)" > "$L"
nvidia-smi -L >> "$L"
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
S=/tmp/sw; W=/tmp/sw/e; mkdir -p $S $W
PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 150 python3 grid_search/results/channels_last/export.py \
  swin $S/swin.onnx >> "$L" 2>&1
E="python3 -m grid_search.study explain --hardware $HW-graph --cuda-graph --steps 10 --warmup 3 --top 40 --train --optimizer adam --loss cross_entropy"
x() {  # name timeout args...
  n=$1; t=$2; shift 2; s=$SECONDS
  timeout -s INT -k 10 $t $E "$@" -o $W/$n > /dev/null 2>> "$L"
  echo "### $n rc $? after $((SECONDS - s)) s" >> "$L"
}
x swin_1_b128 120 --model $S/swin.onnx --dim batch=128 --batch-size 128
x swin_1_b64 100 --model $S/swin.onnx --dim batch=64 --batch-size 64
(cd $W && XZ_OPT="-9 -T0" tar cJf $OUT/traces.txz */prof */prof_replay */program.dir */program.npz */explain.txt) \
    >> "$L" 2>&1
for f in $W/*/explain.txt; do echo "## $f"; head -60 "$f"; done > $OUT/explains.txt
grep "###\|rror" "$L" | tail -8; grep -h "step:\|^## " $OUT/explains.txt
