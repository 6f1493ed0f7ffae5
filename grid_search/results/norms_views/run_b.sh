#!/bin/bash
# 1 GPU (1 x H200 here), after the comparison of call A: (1) the math libraries'
# workspaces the allocator holds (workspace_probe.py); (2) HF BiT-R50x1's one-GPU training
# step explained at 64 images (replayed, float32, Adam): its sealed rows were all too slow.
# Run from the project root, $OUT set, COMMIT holding the commit.
set -u
R=grid_search/results/norms_views
L=$OUT/run_b.log
echo "### project commit $(cat COMMIT)" > "$L"
nvidia-smi -L >> "$L"
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
S=/tmp/nv; W=/tmp/nv/e; mkdir -p $S $W
PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 120 python3 $R/export.py bit $S/bit.onnx >> "$L" 2>&1 &
timeout 60 python3 $R/workspace_probe.py > $OUT/workspace_probe.txt 2>> "$L"
echo "### workspace_probe rc $?" >> "$L"
wait
E="python3 -m grid_search.study explain --hardware $HW-graph --cuda-graph --steps 10 --warmup 3 --top 40 --train --optimizer adam --loss cross_entropy"
s=$SECONDS
timeout -s INT -k 10 150 $E --model $S/bit.onnx --dim batch=64 --batch-size 64 \
  -o $W/bit_1_b64 > /dev/null 2>> "$L"
echo "### bit_1_b64 rc $? after $((SECONDS - s)) s" >> "$L"
(cd $W && XZ_OPT="-9 -T0" tar cJf $OUT/traces.txz */prof */prof_replay */program.dir */program.npz */explain.txt) \
    >> "$L" 2>&1
for f in $W/*/explain.txt; do echo "## $f"; head -60 "$f"; done > $OUT/explains.txt
grep "###\|rror" "$L" | tail -8; cat $OUT/workspace_probe.txt; grep -h "step:\|^## " $OUT/explains.txt
