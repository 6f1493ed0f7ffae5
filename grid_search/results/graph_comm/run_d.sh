#!/bin/bash
# 2 GPUs (2 x H200 here). (1) The products of attention gradients with a transposed
# operand (bmm_nt, bmm_tn), now also of short sequences in many products (windowed
# attention), with the other MatMulGrad families of the same benchmark, float32, device
# time, GPU 0 alone: measurements only (fitted off the device). (2) A model no cost-model
# work tuned on, held out, measured **sealed** (written to $OUT/sealed.tgz only, printed
# nowhere): HF Swin-V2-T at 256 x 256 (torchscript), float32 training steps (cross
# entropy, Adam) at 64 and 128 images, every configuration of <= 2 GPUs replayed; the
# skeleton of its export. Open the archive only after the comparison's commit is named
# in the README. Run from the project root, $OUT set, COMMIT holding the commit.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_d.log
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
echo "### profile $HW-graph" >> "$L"
S=/tmp/s2; K=/tmp/sealed_s2; mkdir -p $S $K $OUT/skel $OUT/cal
s=$SECONDS
PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 150 python3 grid_search/results/channels_last/export.py \
  swinv2 $S/swinv2.onnx >> "$L" 2>&1 &
CUDA_VISIBLE_DEVICES=0 timeout 330 python3 -m calibration -o $OUT/cal/$HW-graph-bmmgrad.json \
  --base $HW --device-time --no-comm --devices 1 --dtypes Float32 \
  --families bmm_nt bmm_tn --measure-only >> "$L" 2>&1
echo "### bmm_nt/bmm_tn rc $? after $((SECONDS - s)) s" >> "$L"
wait
python3 -m grid_search.skeleton strip $S/swinv2.onnx $OUT/skel/swinv2.skel.onnx >> "$L" 2>&1
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
search swinv2_b64_graph 150 --model $S/swinv2.onnx --dim batch=64 $IMG
search swinv2_b128_graph 190 --model $S/swinv2.onnx --dim batch=128 $IMG
(cd $K && rm -f *.png && tar czf "$OUT/sealed.tgz" .)
echo "### sealed runs done after $SECONDS s ($(grep -c "rc 0" $KL) of 2 ok)" >> "$L"
(cd $OUT && tar czf skel.tgz skel && rm -rf skel)
uptime >> "$L"
grep "###\|rror" "$L" | tail -20
