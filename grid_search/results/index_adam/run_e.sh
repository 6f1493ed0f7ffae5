#!/bin/bash
# 1 GPU (1 x H200 here), after call B's comparison (SEW-D 21-34% too fast, EfficientNet-B0
# 4-9%): the one-GPU training steps of SEW-D at 8 and 16 clips (MSE, Adam) and of
# EfficientNet-B0 at 64 images (cross entropy, Adam) explained (replayed, float32).
# Run from the project root, $OUT set, COMMIT holding the commit.
set -u
R=grid_search/results/index_adam
L=$OUT/run_e.log
echo "### project commit $(cat COMMIT)" > "$L"
nvidia-smi -L >> "$L"
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
S=/tmp/nv; W=/tmp/nv/e; mkdir -p $S $W
s=$SECONDS
(PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 150 python3 $R/export.py efficientnet $S/efficientnet.onnx >> "$L" 2>&1) &
PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 150 python3 $R/export.py sewd $S/sewd.onnx >> "$L" 2>&1
echo "### sewd export after $((SECONDS - s)) s" >> "$L"
E="python3 -m grid_search.study explain --hardware $HW-graph --cuda-graph --steps 10 --warmup 3 --top 40 --train --optimizer adam"
for b in 8 16; do
  timeout -s INT -k 10 120 $E --loss mse --model $S/sewd.onnx --dim batch=$b --batch-size $b \
    -o $W/sewd_1_b$b > /dev/null 2>> "$L"
  echo "### sewd_1_b$b rc $? after $((SECONDS - s)) s" >> "$L"
done
wait
timeout -s INT -k 10 150 $E --loss cross_entropy --model $S/efficientnet.onnx --dim batch=64 \
  --batch-size 64 -o $W/efficientnet_1_b64 > /dev/null 2>> "$L"
echo "### efficientnet_1_b64 rc $? after $((SECONDS - s)) s" >> "$L"
(cd $W && XZ_OPT="-9 -T0" tar cJf $OUT/traces.txz */prof */prof_replay */program.dir */explain.txt) \
    >> "$L" 2>&1
for f in $W/*/explain.txt; do echo "## $f"; head -60 "$f"; done > $OUT/explains.txt
grep "###\|rror" "$L" | tail -8; grep -h "step:\|^## " $OUT/explains.txt
for f in $W/*/explain.txt; do echo "## $f"; sed -n 10,26p "$f"; done
