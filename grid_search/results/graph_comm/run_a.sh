#!/bin/bash
# 2 GPUs (2 x H200 here). (1) Every collective over 2 ranks timed two ways side by side:
# eager, host-timed back-to-back calls (as h200-sxm's fits were measured), and replayed
# as a CUDA graph of back-to-back calls (calibrate --device-time: how a --cuda-graph step
# runs them; `send` as the backend sends, a broadcast within the pair). Measurements only
# (CSV; fitted off the device). (2) A model no cost-model work tuned on, held out,
# measured **sealed** (written to $OUT/sealed.tgz only, printed nowhere): HF FocalNet-T,
# float32 training steps (cross entropy, Adam) at 64 and 128 images, every configuration
# of <= 2 GPUs replayed; the skeleton of its export. Open the archive only after the
# comparison's commit is named in the README.
# Run from the project root, $OUT set, COMMIT holding the commit.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_a.log
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
echo "### profile $HW-graph" >> "$L"
S=/tmp/fn; K=/tmp/sealed_fn; mkdir -p $S $K $OUT/skel $OUT/cal
PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 150 python3 grid_search/results/channels_last/export.py \
  focalnet $S/focalnet.onnx >> "$L" 2>&1 &
s=$SECONDS
for mode in graph eager; do
  extra=""; [ $mode = graph ] && extra="--device-time"
  timeout 200 python3 -m calibration -o $OUT/cal/$HW-comm-$mode.json --base $HW --devices 2 \
    --families collectives $extra --measure-only >> "$L" 2>&1
  echo "### collectives $mode rc $? after $((SECONDS - s)) s" >> "$L"
done
wait
python3 -m grid_search.skeleton strip $S/focalnet.onnx $OUT/skel/focalnet.skel.onnx >> "$L" 2>&1
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
search focalnet_b64_graph 150 --model $S/focalnet.onnx --dim batch=64 $IMG
search focalnet_b128_graph 180 --model $S/focalnet.onnx --dim batch=128 $IMG
(cd $K && rm -f *.png && tar czf "$OUT/sealed.tgz" .)
echo "### sealed runs done after $SECONDS s ($(grep -c "rc 0" $KL) of 2 ok)" >> "$L"
(cd $OUT && tar czf skel.tgz skel && rm -rf skel)
uptime >> "$L"
grep "###\|rror" "$L" | tail -20
