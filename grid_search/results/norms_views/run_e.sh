#!/bin/bash
# 1 GPU (1 x H200 here), after the comparison of call D (every DeBERTa row ~20% too fast):
# its one-GPU training step explained at 8 x 512 tokens (replayed, float32, Adam, MSE).
# Run from the project root, $OUT set, COMMIT holding the commit.
set -u
R=grid_search/results/norms_views
L=$OUT/run_e.log
echo "### project commit $(cat COMMIT)" > "$L"
nvidia-smi -L >> "$L"
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
S=/tmp/nv; W=/tmp/nv/e; mkdir -p $S $W
PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 150 python3 $R/export.py deberta_dynamo $S/deberta.onnx >> "$L" 2>&1
E="python3 -m grid_search.study explain --hardware $HW-graph --cuda-graph --steps 10 --warmup 3 --top 40 --train --optimizer adam --loss mse"
s=$SECONDS
timeout -s INT -k 10 150 $E --model $S/deberta.onnx --dim batch=8 --dim seq=512 --batch-size 8 \
  -o $W/deberta_1_b8 > /dev/null 2>> "$L"
echo "### deberta_1_b8 rc $? after $((SECONDS - s)) s" >> "$L"
(cd $W && XZ_OPT="-9 -T0" tar cJf $OUT/traces.txz */prof */prof_replay */program.dir */program.npz */explain.txt) \
    >> "$L" 2>&1
for f in $W/*/explain.txt; do echo "## $f"; head -60 "$f"; done > $OUT/explains.txt
grep "###\|rror" "$L" | tail -8; grep -h "step:\|^## " $OUT/explains.txt; sed -n 8,30p $OUT/explains.txt
