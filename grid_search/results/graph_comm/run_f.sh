#!/bin/bash
# 4 GPUs (4 x H200 here): a model no cost-model work tuned on, held out, measured
# **sealed** (written to $OUT/sealed.tgz only, printed nowhere): HF PoolFormer-S12
# (dynamo), float32 training steps (cross entropy, Adam) at 128 and 256 images, every
# configuration of <= 4 GPUs replayed; the skeleton of its export. Open the archive only
# after the comparison's commit is named in the README.
# Run from the project root, $OUT set, COMMIT holding the commit.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_f.log
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
echo "### profile $HW-graph" >> "$L"
S=/tmp/pf; K=/tmp/sealed_pf; mkdir -p $S $K $OUT/skel
s=$SECONDS
PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 150 python3 grid_search/results/channels_last/export.py \
  poolformer $S/poolformer.onnx >> "$L" 2>&1
python3 -m grid_search.skeleton strip $S/poolformer.onnx $OUT/skel/poolformer.skel.onnx >> "$L" 2>&1
echo "### export and skeleton done after $((SECONDS - s)) s" >> "$L"
G="python3 -m distir grid-search --devices 4 --fewer-devices --hardware $HW-graph --max-microbatches 8 --schedules 1f1b gpipe --run-top 40 --cuda-graph"
KL=$K/sealed.log
echo "### project commit $(cat COMMIT), profile $HW-graph" >> $KL
search() {  # name timeout args...
  local name=$1 t=$2; shift 2
  local s=$SECONDS
  timeout -s INT -k 20 "$t" $G "$@" -o "$K/$name.csv" >> "$KL" 2>&1
  echo "### $name rc $? after $((SECONDS - s)) s" >> "$KL"
}
IMG="--train --loss cross_entropy --optimizer adam"
search poolformer_b128_graph 250 --model $S/poolformer.onnx --dim batch=128 $IMG
search poolformer_b256_graph 270 --model $S/poolformer.onnx --dim batch=256 $IMG
(cd $K && rm -f *.png && tar czf "$OUT/sealed.tgz" .)
echo "### sealed runs done after $SECONDS s ($(grep -c "rc 0" $KL) of 2 ok)" >> "$L"
(cd $OUT && tar czf skel.tgz skel && rm -rf skel)
uptime >> "$L"
grep "###\|rror" "$L" | tail -20
