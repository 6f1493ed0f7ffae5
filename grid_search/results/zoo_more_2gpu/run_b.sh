#!/bin/bash
# Call B, the same lease as call A when still held (else exports again): the second batch
# size of call A's models: HF GPT-2 16 x 512 and ViT 64 (as ../zoo_2gpu/ ran them), and,
# sealed as in call A, T5 encoder 8 x 512, torchvision ViT-B/16 32, nn.TransformerEncoder
# 8 x 512, EfficientNet-B0 64.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_b.log
R=grid_search/results/zoo_more_2gpu
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
echo "### profile $HW-graph" >> "$L"
S=/tmp/zoo; K=/tmp/sealed_b; mkdir -p $S $K
s=$SECONDS
ex() { [ -s "$S/$2.onnx" ] || PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 150 python3 "$1" "${@:3}" $S/$2.onnx >> "$L" 2>&1; }
ex grid_search/results/graph_zoo_4gpu/export_hf_gpt2.py gpt2_hf &
ex grid_search/results/zoo_2gpu/export.py vit vit &
for m in t5 tvit encoder efficientnet; do ex $R/export.py $m $m & done
wait
echo "### exports after $((SECONDS - s)) s" >> "$L"
G="python3 -m distir grid-search --devices 2 --fewer-devices --hardware $HW-graph --max-microbatches 8 --schedules 1f1b gpipe --run-top 20 --cuda-graph"
search() {  # log dir name timeout args...
  local log=$1 dir=$2 name=$3 t=$4; shift 4
  local s=$SECONDS
  timeout -s INT -k 20 "$t" $G "$@" -o "$dir/$name.csv" >> "$log" 2>&1
  echo "### $name rc $? after $((SECONDS - s)) s" >> "$log"
}
search "$L" $OUT hf_gpt2_b16_graph 120 --model $S/gpt2_hf.onnx --dim batch=16 --dim seq=512 \
    --train --loss cross_entropy --optimizer adam
search "$L" $OUT vit_b64_graph 100 --model $S/vit.onnx --dim batch=64 --train --loss mse \
    --optimizer adam
KL=$K/sealed.log
echo "### project commit $(cat COMMIT), profile $HW-graph" >> $KL
search $KL $K t5_b8_graph 90 --model $S/t5.onnx --dim batch=8 --dim seq=512 --train \
    --loss mse --optimizer adam
search $KL $K tvit_b32_graph 90 --model $S/tvit.onnx --dim batch=32 --train \
    --loss cross_entropy --optimizer adam
search $KL $K encoder_b8_graph 90 --model $S/encoder.onnx --dim batch=8 --dim seq=512 \
    --train --loss mse --optimizer adam
search $KL $K efficientnet_b64_graph 80 --model $S/efficientnet.onnx --dim batch=64 \
    --train --loss cross_entropy --optimizer sgd
(cd $K && rm -f *.png && tar czf "$OUT/sealed_b.tgz" .)
echo "### sealed runs done after $SECONDS s (rc lines: $(grep -c 'rc 0' $KL) of 4 ok)" >> "$L"
uptime >> "$L"
rm -f $OUT/*.png
grep -v "^\s*File\|^    \|configurations, .* elapsed" "$L" | grep "###\|measured D\|batch .*Spearman\|slowed\|rror" | tail -40
