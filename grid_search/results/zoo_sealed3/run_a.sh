#!/bin/bash
# For a later session (not run yet), 2 GPUs of either kind (h100-sxm-graph or h200-sxm-graph
# by the card): four float32 models never run on a GPU, held out, measured **sealed**
# (written to $OUT/sealed.tgz only, printed nowhere): HF ConvNeXt-T (batch 64 and 128,
# cross entropy, Adam), HF MobileNetV2 (64 and 128), HF GPT-NeoX at Pythia-160m's sizes
# (dynamo; 8 x 512 and 16 x 512, mse on the last hidden state, Adam) and HF OPT at
# OPT-125m's sizes (torchscript; 8 x 512 and 16 x 512), by export.py: every configuration of
# <= 2 GPUs, replayed, as ../zoo_more_2gpu/ ran its models; then the skeleton of every export
# (grid_search.skeleton), to simulate the rows again here on the very graphs measured.
# ConvNeXt and MobileNetV2 test the grouped convolution families (fitted on
# calibration.bench_train.grouped_conv_shapes only), NeoX and OPT the float32 products and
# layouts at a new model's sizes. Open the archive only after the cost model is frozen for
# the comparison (a commit named in the README), then `compare.py`.
# Run from the project root, $OUT set.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_a.log
R=grid_search/results/zoo_sealed3
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
echo "### profile $HW-graph" >> "$L"
S=/tmp/zoo3; K=/tmp/sealed3; mkdir -p $S $K $OUT/skel
s=$SECONDS
for m in convnext mobilenet neox opt; do
  PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 150 python3 $R/export.py $m $S/$m.onnx >> "$L" 2>&1 &
done
wait
for m in convnext mobilenet neox opt; do
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
search convnext_b64_graph 60 --model $S/convnext.onnx --dim batch=64 $IMG
search convnext_b128_graph 70 --model $S/convnext.onnx --dim batch=128 $IMG
search mobilenet_b64_graph 50 --model $S/mobilenet.onnx --dim batch=64 $IMG
search mobilenet_b128_graph 50 --model $S/mobilenet.onnx --dim batch=128 $IMG
search neox_b8_graph 60 --model $S/neox.onnx --dim batch=8 $TOK
search neox_b16_graph 70 --model $S/neox.onnx --dim batch=16 $TOK
search opt_b8_graph 60 --model $S/opt.onnx --dim batch=8 $TOK
search opt_b16_graph 70 --model $S/opt.onnx --dim batch=16 $TOK
(cd $K && rm -f *.png && tar czf "$OUT/sealed.tgz" .)
echo "### sealed runs done after $SECONDS s ($(grep -c 'rc 0' $KL) of 8 ok)" >> "$L"
(cd $OUT && tar czf skel.tgz skel && rm -rf skel)
uptime >> "$L"
grep "###\|rror" "$L" | tail -20
