#!/bin/bash
# One GPU (1 x H200 here): convolutions handed channels-last inputs.
# 1. dw_layouts.py (../zoo_sealed4): SegFormer's depthwise 3 x 3 and both gradients with NCHW
#    and channels-last x and dy, side by side.
# 2. The six channels-last convolution families (conv_nhwc*, conv_grouped_nhwc*), float32,
#    240 shapes each of the dense and grouped samples (seed 0), measured only.
# 3. `study explain` of the one-GPU training step (Adam, cross-entropy, replayed CUDA graph)
#    of SegFormer at 64 and 128 (development: its sealed study's misses), and of two models
#    no cost-model work looked at (export.py here): PVT-v2 b0 at 64 (its feed-forward's
#    depthwise 3 x 3 reads a permuted view, as SegFormer's) and MobileViT-XXS at 64 (none of
#    its convolutions reads one: a control).
# Run from the project root, $OUT set, COMMIT holding the commit.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_a.log
R=grid_search/results
echo "### project commit $(cat COMMIT)" > "$L"
nvidia-smi -L >> "$L"
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
S=/tmp/cl; W=/tmp/cl/a; mkdir -p $S $W
(export PYTHONPATH=$PWD:${PYTHONPATH:-}
 timeout 200 python3 $R/zoo_sealed4/export.py segformer $S/segformer.onnx
 for m in pvt_v2 mobilevit; do timeout 200 python3 $R/channels_last/export.py $m $S/$m.onnx; done
) >> "$L" 2>&1 &
timeout 90 python3 $R/zoo_sealed4/dw_layouts.py > $OUT/dw_layouts.txt 2>> "$L"
echo "### dw_layouts rc $? after $SECONDS s" >> "$L"
C="python3 -m calibration --base $HW --device-time --no-comm --devices 1 --measure-only"
timeout -s INT 240 $C -o $OUT/$HW-graph-nhwc.json --name $HW-graph-nhwc \
    --families conv_nhwc conv_nhwc_dgrad conv_nhwc_wgrad conv_grouped_nhwc \
    conv_grouped_nhwc_dgrad conv_grouped_nhwc_wgrad --dtypes Float32 > $OUT/calibrate.log 2>&1
echo "### calibrate rc $? after $SECONDS s" >> "$L"
wait
E="python3 -m grid_search.study explain --hardware $HW-graph --cuda-graph --steps 10 --warmup 3 --top 40 --train --optimizer adam --loss cross_entropy"
x() {  # name timeout args...
  n=$1; t=$2; shift 2; s=$SECONDS
  timeout -s INT -k 10 $t $E "$@" -o $W/$n > /dev/null 2>> "$L"
  echo "### $n rc $? after $((SECONDS - s)) s" >> "$L"
}
x segformer_b64 60 --model $S/segformer.onnx --dim batch=64 --batch-size 64
x pvt_v2_b64 60 --model $S/pvt_v2.onnx --dim batch=64 --batch-size 64
x mobilevit_b64 60 --model $S/mobilevit.onnx --dim batch=64 --batch-size 64
x segformer_b128 60 --model $S/segformer.onnx --dim batch=128 --batch-size 128
(cd $W && tar czf $OUT/traces.tgz */prof */prof_replay */program.dir */program.npz */explain.txt) \
    >> "$L" 2>&1
for f in $W/*/explain.txt; do echo "## $f"; head -45 "$f"; done > $OUT/explains.txt
grep "###\|rror" "$L" | tail -12; cat $OUT/dw_layouts.txt; tail -3 $OUT/calibrate.log
