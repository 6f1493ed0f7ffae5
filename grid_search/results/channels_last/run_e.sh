#!/bin/bash
# 2 GPUs (2 x H200 here), after the sealed study (call_c/): its worst rows explained.
# MobileViT-XXS at 64: P2 x K4 (16-image microbatches, 34-36% slower than predicted and
# slower than K2 and K8) and P2 x K2 beside it; CvT-13 at 64: T2 (-10.9%).
# Run from the project root, $OUT set, COMMIT holding the commit.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_e.log
R=grid_search/results/channels_last
echo "### project commit $(cat COMMIT)" > "$L"
nvidia-smi -L >> "$L"
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
S=/tmp/cl; W=/tmp/cl/e; mkdir -p $S $W
for m in cvt mobilevit; do
  PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 150 python3 $R/export.py $m $S/$m.onnx >> "$L" 2>&1 &
done
wait
E="python3 -m grid_search.study explain --hardware $HW-graph --cuda-graph --steps 10 --warmup 3 --top 40 --train --optimizer adam --loss cross_entropy"
x() {  # name timeout args...
  n=$1; t=$2; shift 2; s=$SECONDS
  timeout -s INT -k 10 $t $E "$@" -o $W/$n > /dev/null 2>> "$L"
  echo "### $n rc $? after $((SECONDS - s)) s" >> "$L"
}
x mobilevit_p2k4 80 --model $S/mobilevit.onnx --dim batch=64 --batch-size 64 --pp 2 \
    --microbatches 4 --schedule 1f1b
x mobilevit_p2k2 80 --model $S/mobilevit.onnx --dim batch=64 --batch-size 64 --pp 2 \
    --microbatches 2 --schedule 1f1b
x cvt_t2 80 --model $S/cvt.onnx --dim batch=64 --batch-size 64 --tp 2
(cd $W && XZ_OPT="-6 -T0" tar cJf $OUT/traces.txz */prof */prof_replay */program.dir */program.npz */explain.txt) \
    >> "$L" 2>&1
for f in $W/*/explain.txt; do echo "## $f"; head -40 "$f"; done > $OUT/explains.txt
grep "###\|rror" "$L" | tail -8; grep -h "step:\|^## " $OUT/explains.txt
