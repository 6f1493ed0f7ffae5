#!/bin/bash
# 1 GPU (1 x H200 here). DeBERTa-v2 (v3-base sizes, dynamo export; ../norms_views/, opened)
# one-GPU training step at 8 x 512 explained with this folder's profile (replayed,
# float32, Adam, MSE, its own weights). Run from the project root, $OUT set, COMMIT
# holding the commit.
set -u
L=$OUT/run_j.log
echo "### project commit $(cat COMMIT)" > "$L"
nvidia-smi -L >> "$L"
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
S=/tmp/nv; W=/tmp/nv/e; mkdir -p $S $W
s=$SECONDS
PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 150 python3 grid_search/results/norms_views/export.py \
  deberta_dynamo $S/deberta.onnx >> "$L" 2>&1
echo "### export after $((SECONDS - s)) s" >> "$L"
timeout -s INT -k 10 200 python3 -m grid_search.study explain --hardware $HW-graph --cuda-graph \
  --steps 10 --warmup 3 --top 40 --train --optimizer adam --loss mse \
  --model $S/deberta.onnx --dim batch=8 --dim seq=512 --batch-size 8 \
  -o $W/deberta_1_b8 > /dev/null 2>> "$L"
echo "### deberta_1_b8 rc $? after $((SECONDS - s)) s" >> "$L"
(cd $W && XZ_OPT="-9 -T0" tar cJf $OUT/traces.txz */prof */prof_replay */program.dir */explain.txt) \
    >> "$L" 2>&1
head -70 $W/deberta_1_b8/explain.txt > $OUT/explains.txt
grep "###\|rror" "$L" | tail -8; sed -n 1,40p $OUT/explains.txt
