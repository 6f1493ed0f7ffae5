#!/bin/bash
# 2 GPUs (2 x H200 here): a model no cost-model work tuned on, held out, measured
# **sealed** (written to $OUT/sealed.tgz only, printed nowhere), float32 training steps
# (cross entropy, Adam), every configuration of <= 2 GPUs replayed at two batch sizes:
# HF ConvNeXt-V2 at atto's sizes (64 and 128 images: depthwise 7 x 7 of NCHW images, layer
# norms and global response normalization over permuted tokens); then the skeleton of
# the export. Open the archive only after the comparison's commit is named in the README.
# Run from the project root, $OUT set, COMMIT holding the commit.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_f.log
R=grid_search/results/channels_last
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
echo "### profile $HW-graph" >> "$L"
S=/tmp/cl; K=/tmp/sealed_cl2; mkdir -p $S $K $OUT/skel
s=$SECONDS
for m in convnextv2; do
  PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 150 python3 $R/export.py $m $S/$m.onnx >> "$L" 2>&1 &
done
wait
for m in convnextv2; do
  python3 -m grid_search.skeleton strip $S/$m.onnx $OUT/skel/$m.skel.onnx >> "$L" 2>&1 &
done
wait
echo "### exports and skeletons after $((SECONDS - s)) s" >> "$L"
G="python3 -m distir grid-search --devices 2 --fewer-devices --hardware $HW-graph --max-microbatches 8 --schedules 1f1b gpipe --run-top 20 --cuda-graph"
KL=$K/sealed.log
echo "### project commit $(cat COMMIT), profile $HW-graph" >> $KL
search() {  # name timeout args...
  local name=$1 t=$2; shift 2
  local s=$SECONDS
  timeout -s INT -k 20 "$t" $G "$@" -o "$K/$name.csv" >> "$KL" 2>&1
  echo "### $name rc $? after $((SECONDS - s)) s" >> "$KL"
}
IMG="--train --loss cross_entropy --optimizer adam"
search convnextv2_b64_graph 70 --model $S/convnextv2.onnx --dim batch=64 $IMG
search convnextv2_b128_graph 90 --model $S/convnextv2.onnx --dim batch=128 $IMG
(cd $K && rm -f *.png && tar czf "$OUT/sealed.tgz" .)
echo "### sealed runs done after $SECONDS s ($(grep -c "rc 0" $KL) of 2 ok)" >> "$L"
(cd $OUT && tar czf skel.tgz skel && rm -rf skel)
uptime >> "$L"
grep "###\|rror" "$L" | tail -20
