#!/bin/bash
# One GPU (1 x H200 here), after call_a/: more convolution samples, then two explains.
# 1. One calibration run, seed 3, float32: the dense convolutions in both formats
#    (conv*, conv_nhwc*: 240 CNN shapes and, new, 60 patch embeddings of vision
#    transformers, kernel = stride 2 to 16 and 7 x 7 of stride 4, which call_a's explains
#    priced 53-75% under), the channels-last grouped ones again (a second sample: their
#    weight gradient's held-out error was 35.6% on one), and the reductions with rows of
#    32 to 256 (bias gradients of narrow token rows: 20-70% under in call_a).
# 2. `study explain` of CvT-13's one-GPU training step at 64 (export.py; its repeated
#    blocks become layer functions, so its backward's convolutions read views made in
#    another function) and of PVT-v2 b0's at 128.
# Run from the project root, $OUT set, COMMIT holding the commit.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_b.log
R=grid_search/results
echo "### project commit $(cat COMMIT)" > "$L"
nvidia-smi -L >> "$L"
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
S=/tmp/cl; W=/tmp/cl/b; mkdir -p $S $W
(export PYTHONPATH=$PWD:${PYTHONPATH:-}
 for m in cvt pvt_v2; do nice -n 19 timeout 300 python3 $R/channels_last/export.py $m $S/$m.onnx; done
) >> "$L" 2>&1 &
C="python3 -m calibration --base $HW --device-time --no-comm --devices 1 --measure-only"
timeout -s INT 400 $C -o $OUT/$HW-graph-conv3.json --name $HW-graph-conv3 --seed 3 \
    --families conv conv_dgrad conv_wgrad conv_nhwc conv_nhwc_dgrad conv_nhwc_wgrad \
    conv_grouped_nhwc conv_grouped_nhwc_dgrad conv_grouped_nhwc_wgrad reduce \
    --dtypes Float32 > $OUT/calibrate.log 2>&1
echo "### calibrate rc $? after $SECONDS s" >> "$L"
wait
E="python3 -m grid_search.study explain --hardware $HW-graph --cuda-graph --steps 10 --warmup 3 --top 40 --train --optimizer adam --loss cross_entropy"
x() {  # name timeout args...
  n=$1; t=$2; shift 2; s=$SECONDS
  timeout -s INT -k 10 $t $E "$@" -o $W/$n > /dev/null 2>> "$L"
  echo "### $n rc $? after $((SECONDS - s)) s" >> "$L"
}
x cvt_b64 70 --model $S/cvt.onnx --dim batch=64 --batch-size 64
x pvt_v2_b128 60 --model $S/pvt_v2.onnx --dim batch=128 --batch-size 128
(cd $W && XZ_OPT="-9 -T0" tar cJf $OUT/traces.txz */prof */prof_replay */program.dir */program.npz */explain.txt) \
    >> "$L" 2>&1
for f in $W/*/explain.txt; do echo "## $f"; head -45 "$f"; done > $OUT/explains.txt
grep "###\|rror" "$L" | tail -12; tail -4 $OUT/calibrate.log
