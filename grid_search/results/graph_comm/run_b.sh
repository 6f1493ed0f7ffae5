#!/bin/bash
# 2 GPUs (2 x H200 here). (1) A model no cost-model work tuned on, held out, measured
# **sealed** (written to $OUT/sealed.tgz only, printed nowhere): HF Swin-T (torchscript),
# float32 training steps (cross entropy, Adam) at 64 and 128 images, every configuration
# of <= 2 GPUs replayed; the skeleton of its export. Open the archive only after the
# comparison's commit is named in the README. (2) cudnn_benchmark.py: convolutions with
# cuDNN's autotuner off and on, side by side, on GPU 0 while nothing else runs.
# Run from the project root, $OUT set, COMMIT holding the commit.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_b.log
R=grid_search/results/graph_comm
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
echo "### profile $HW-graph" >> "$L"
S=/tmp/sw; K=/tmp/sealed_sw; mkdir -p $S $K $OUT/skel
s=$SECONDS
PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 150 python3 grid_search/results/channels_last/export.py \
  swin $S/swin.onnx >> "$L" 2>&1
python3 -m grid_search.skeleton strip $S/swin.onnx $OUT/skel/swin.skel.onnx >> "$L" 2>&1
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
search swin_b64_graph 150 --model $S/swin.onnx --dim batch=64 $IMG
search swin_b128_graph 180 --model $S/swin.onnx --dim batch=128 $IMG
(cd $K && rm -f *.png && tar czf "$OUT/sealed.tgz" .)
echo "### sealed runs done after $SECONDS s ($(grep -c "rc 0" $KL) of 2 ok)" >> "$L"
(cd $OUT && tar czf skel.tgz skel && rm -rf skel)
s=$SECONDS
timeout 200 python3 $R/cudnn_benchmark.py $OUT/cudnn_benchmark.md >> "$L" 2>&1
echo "### cudnn_benchmark rc $? after $((SECONDS - s)) s" >> "$L"
uptime >> "$L"
grep "###\|rror" "$L" | tail -20
