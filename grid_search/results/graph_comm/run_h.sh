#!/bin/bash
# 2 GPUs (2 x H200 here). (1) Average pools and their gradients (3 x 3 windows of stride 1
# and 2, the `avgpool` and `avgpool_grad` families), float32, device time, GPU 0 alone:
# measurements only (fitted off the device). (2) **Sealed** (written to $OUT/sealed.tgz
# only, printed nowhere): HF PoolFormer-M36 (dynamo; a larger sibling of PoolFormer-S12,
# whose explain motivated (1): widths 96-768, depths 6-6-18-6), float32 training steps
# (cross entropy, Adam) at 64 and 128 images, every configuration of <= 2 GPUs replayed;
# the skeleton of its export. Open the archive only after the comparison's commit is
# named in the README. Run from the project root, $OUT set, COMMIT holding the commit.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_h.log
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
echo "### profile $HW-graph" >> "$L"
S=/tmp/pm; K=/tmp/sealed_pm; mkdir -p $S $K $OUT/skel $OUT/cal
s=$SECONDS
PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 150 python3 grid_search/results/channels_last/export.py \
  poolformer_m36 $S/poolformer_m36.onnx >> "$L" 2>&1 &
CUDA_VISIBLE_DEVICES=0 timeout 200 python3 -m calibration -o $OUT/cal/$HW-graph-pool.json \
  --base $HW --device-time --no-comm --devices 1 --dtypes Float32 \
  --families avgpool avgpool_grad --measure-only >> "$L" 2>&1
echo "### avgpool families rc $? after $((SECONDS - s)) s" >> "$L"
wait
python3 -m grid_search.skeleton strip $S/poolformer_m36.onnx $OUT/skel/poolformer_m36.skel.onnx \
  >> "$L" 2>&1
echo "### export and skeleton done after $((SECONDS - s)) s" >> "$L"
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
search poolformer_m36_b64_graph 150 --model $S/poolformer_m36.onnx --dim batch=64 $IMG
search poolformer_m36_b128_graph 200 --model $S/poolformer_m36.onnx --dim batch=128 $IMG
(cd $K && rm -f *.png && tar czf "$OUT/sealed.tgz" .)
echo "### sealed runs done after $SECONDS s ($(grep -c "rc 0" $KL) of 2 ok)" >> "$L"
(cd $OUT && tar czf skel.tgz skel && rm -rf skel)
uptime >> "$L"
grep "###\|rror" "$L" | tail -20
