#!/bin/bash
# 1 GPU. After call F was opened: HF SqueezeBERT's one-GPU step at 16 x 512 explained
# (replayed, float32, on its own weights): every row of call F was 35-45% too fast.
# Run from the project root, $OUT set, COMMIT holding the commit.
set -u
R=grid_search/results/adam_step
export NCCL_NVLS_ENABLE=0
L=$OUT/run_g.log
echo "### project commit $(cat COMMIT)" > "$L"
nvidia-smi -L >> "$L"
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
S=/tmp/nv; W=/tmp/nv/e; mkdir -p $S $W
s=$SECONDS
PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 100 python3 $R/export.py squeezebert $S/squeezebert.onnx >> "$L" 2>&1
echo "### export after $((SECONDS - s)) s" >> "$L"
timeout -s INT -k 10 110 python3 -m grid_search.study explain --hardware $HW-graph --cuda-graph \
  --steps 5 --warmup 2 --top 30 --train --optimizer adam --loss mse \
  --model $S/squeezebert.onnx --dim batch=16 --dim seq=512 --batch-size 16 \
  -o $W/squeezebert_1_b16 > /dev/null 2>> "$L"
echo "### squeezebert_1_b16 rc $? after $((SECONDS - s)) s" >> "$L"
(cd $W && XZ_OPT="-9 -T0" tar cJf $OUT/traces.txz */prof_replay */program.dir */explain.txt) >> "$L" 2>&1
head -60 $W/squeezebert_1_b16/explain.txt > $OUT/explains.txt
grep "###\|rror" "$L" | tail; head -30 $OUT/explains.txt
