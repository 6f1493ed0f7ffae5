#!/bin/bash
# 2 GPUs. Not run yet (written after call A, with no device time left): the one miss of
# call A explained. StableLM's and OLMo's D2 steps at 8 x 512 ran 6.4-6.6% slower than
# predicted (7 ms more than D2 adds beyond halving the batch, README.md), GPT-J's and
# Qwen2's did not. `study explain` of D2 and of D1 (and T2, which ran 7% faster than D2)
# for StableLM, and of D2 for GPT-J beside it, replayed as CUDA graphs: per op kind and
# rank, the simulated and measured time, the all-reduce's exposed part on the critical
# path. Then GPT-J's search at 16 x 512, which call A's time limit cut. Run from the
# project root, $OUT set, COMMIT holding the commit.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_b.log
echo "### project commit $(cat COMMIT)" > "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
export PYTHONPATH=$PWD:${PYTHONPATH:-}
S=/tmp/heldout_models; W=/tmp/heldout_b; mkdir -p $S $W $OUT/rows
s=$SECONDS
for n in stablelm gptj; do
  timeout 240 python3 grid_search/results/heldout_1gpu/export.py $n $S/$n.onnx \
    > $S/$n.export.log 2>&1 &
done
wait
for n in stablelm gptj; do tail -n 1 $S/$n.export.log >> "$L"; done
echo "### exports after $((SECONDS - s)) s" >> "$L"
TOK="--dim batch=8 --dim seq=512 --train --loss mse --optimizer adam --batch-size 8"
explain() {  # name tag options...
  local n=$1 tag=$2; shift 2
  timeout -s INT -k 10 150 python3 -m grid_search.study explain --hardware $HW-graph \
    --cuda-graph --steps 5 --warmup 2 --top 30 --model $S/$n.onnx $TOK "$@" \
    -o $W/${n}_$tag > /dev/null 2>> "$L"
  echo "### explain ${n}_$tag rc $? after $((SECONDS - s)) s" >> "$L"
}
explain stablelm d2 --dp 2
explain stablelm d1
explain stablelm t2 --tp 2
explain gptj d2 --dp 2
(cd $W && XZ_OPT="-9 -T0" tar cJf $OUT/explains.txz */explain.txt */explain.json) >> "$L" 2>&1
for f in $W/*/explain.txt; do echo "=== $f"; head -45 $f; done > $OUT/explains.txt
G="python3 -m distir grid-search --devices 2 --fewer-devices --hardware $HW-graph --max-microbatches 8 --schedules 1f1b gpipe --run-top 20 --cuda-graph"
timeout -s INT -k 20 150 $G --model $S/gptj.onnx --dim batch=16 --dim seq=512 --train \
  --loss mse --optimizer adam -o $OUT/rows/gptj_b16.csv >> "$L" 2>&1
echo "### gptj_b16 rc $? after $((SECONDS - s)) s" >> "$L"
(cd $OUT && tar czf rows_b.tgz rows && rm -rf rows)
grep "###\|rror" "$L" | tail -20; grep -A3 "^step" $OUT/explains.txt | head -40
