#!/bin/bash
# 1 GPU (1 x H200 here). After call B was opened: the wav2vec 2.0-Conformer's one-GPU step
# at 8 clips explained (replayed, float32, on its own weights); the eager and replayed
# traces kept, so that the step can be explained again offline (distir explain --replay).
# Run from the project root, $OUT set, COMMIT holding the commit.
set -u
R=grid_search/results/conv1d_tokens
export NCCL_NVLS_ENABLE=0
L=$OUT/run_d.log
echo "### project commit $(cat COMMIT)" > "$L"
nvidia-smi -L >> "$L"
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
S=/tmp/cf; W=/tmp/cf/e; mkdir -p $S $W
s=$SECONDS
PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 120 python3 $R/export.py conformer $S/conformer.onnx >> "$L" 2>&1
echo "### export after $((SECONDS - s)) s" >> "$L"
timeout -s INT -k 10 150 python3 -m grid_search.study explain --hardware $HW-graph --cuda-graph \
  --steps 5 --warmup 2 --top 40 --train --optimizer adam --loss mse \
  --model $S/conformer.onnx --dim batch=8 --batch-size 8 \
  -o $W/conformer_1_b8 > /dev/null 2>> "$L"
echo "### conformer_1_b8 rc $? after $((SECONDS - s)) s" >> "$L"
(cd $W && XZ_OPT="-9 -T0" tar cJf $OUT/traces.txz */prof */prof_replay */program.dir */explain.txt) >> "$L" 2>&1
head -70 $W/conformer_1_b8/explain.txt > $OUT/explains.txt
grep "###\|rror" "$L" | tail; head -45 $OUT/explains.txt
