#!/bin/bash
# 2 GPUs (2 x H200 here). After call B was opened: two of the wav2vec 2.0-Conformer's
# distributed rows explained (replayed, float32, on its own weights): D2 at 8 clips (-7.5%)
# and P2 x K4 1f1b at 16 clips (-9.9%); eager and replayed traces kept.
# Run from the project root, $OUT set, COMMIT holding the commit.
set -u
R=grid_search/results/conv1d_tokens
export NCCL_NVLS_ENABLE=0
L=$OUT/run_e.log
echo "### project commit $(cat COMMIT)" > "$L"
nvidia-smi -L >> "$L"
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
S=/tmp/cf; W=/tmp/cf/e; mkdir -p $S $W
s=$SECONDS
PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 120 python3 $R/export.py conformer $S/conformer.onnx >> "$L" 2>&1
echo "### export after $((SECONDS - s)) s" >> "$L"
EX="python3 -m grid_search.study explain --hardware $HW-graph --cuda-graph --steps 5 --warmup 2 --top 40 --train --optimizer adam --loss mse --model $S/conformer.onnx"
timeout -s INT -k 10 150 $EX --dim batch=8 --batch-size 8 --dp 2 -o $W/conformer_d2_b8 > /dev/null 2>> "$L"
echo "### conformer_d2_b8 rc $? after $((SECONDS - s)) s" >> "$L"
timeout -s INT -k 10 150 $EX --dim batch=16 --batch-size 16 --pp 2 --microbatches 4 --schedule 1f1b -o $W/conformer_p2k4_b16 > /dev/null 2>> "$L"
echo "### conformer_p2k4_b16 rc $? after $((SECONDS - s)) s" >> "$L"
(cd $W && XZ_OPT="-9 -T0" tar cJf $OUT/traces.txz */prof */prof_replay */program.dir */explain.txt) >> "$L" 2>&1
for d in $W/*; do head -75 $d/explain.txt; echo; done > $OUT/explains.txt
grep "###\|rror" "$L" | tail; grep "step:\|^device\|^ *[01] " $OUT/explains.txt | head -20
