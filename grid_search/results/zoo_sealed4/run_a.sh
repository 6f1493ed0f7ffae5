#!/bin/bash
# 2 GPUs of either kind (h100-sxm-graph or h200-sxm-graph by the card): four models never
# run on a GPU, held out, measured **sealed** (written to $OUT/sealed.tgz only, printed
# nowhere), float32 training steps, every configuration of <= 2 GPUs replayed at two batch
# sizes: HF SegFormer MiT-b0 (dynamo; 64 and 128 images), HF RegNet (torchscript; 64 and
# 128), the torchvision-layout MobileNetV3-Small 1.0 (dynamo; 128 and 256), all cross
# entropy and Adam, and HF Qwen2 12 x 768 (dynamo; 8 x 512 and 16 x 512 tokens, mse on the
# last hidden state, Adam), by export.py; then the skeleton of every export. They test
# the rows' shapes the layer norms, reductions, copies and pads were measured with in
# ../cnn_kernels/ on models not used to find them. Open the archive only after the
# comparison's commit is named in the README, then `compare.py`.
# Run from the project root, $OUT set.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_a.log
R=grid_search/results/zoo_sealed4
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
echo "### profile $HW-graph" >> "$L"
S=/tmp/zoo4; K=/tmp/sealed4; mkdir -p $S $K $OUT/skel
s=$SECONDS
for m in segformer regnet mobilenetv3 qwen2; do
  PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 100 python3 $R/export.py $m $S/$m.onnx >> "$L" 2>&1 &
done
wait
for m in segformer regnet mobilenetv3 qwen2; do
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
TOK="--dim seq=512 --train --loss mse --optimizer adam"
search segformer_b64_graph 55 --model $S/segformer.onnx --dim batch=64 $IMG
search segformer_b128_graph 60 --model $S/segformer.onnx --dim batch=128 $IMG
search regnet_b64_graph 55 --model $S/regnet.onnx --dim batch=64 $IMG
search regnet_b128_graph 60 --model $S/regnet.onnx --dim batch=128 $IMG
search mobilenetv3_b128_graph 45 --model $S/mobilenetv3.onnx --dim batch=128 $IMG
search mobilenetv3_b256_graph 45 --model $S/mobilenetv3.onnx --dim batch=256 $IMG
search qwen2_b8_graph 55 --model $S/qwen2.onnx --dim batch=8 $TOK
search qwen2_b16_graph 60 --model $S/qwen2.onnx --dim batch=16 $TOK
(cd $K && rm -f *.png && tar czf "$OUT/sealed.tgz" .)
echo "### sealed runs done after $SECONDS s ($(grep -c 'rc 0' $KL) of 8 ok)" >> "$L"
(cd $OUT && tar czf skel.tgz skel && rm -rf skel)
uptime >> "$L"
grep "###\|rror" "$L" | tail -20
