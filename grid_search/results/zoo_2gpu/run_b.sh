#!/bin/bash
# Call B, 2 GPUs, the same lease as call A when it is still held: run_a.sh's zoo models at a
# second batch size (BERT 16 x 512, ResNet-50 64, HF GPT-2 8 x 512), replayed.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_b.log
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
S=/tmp/zoo; mkdir -p $S
s=$SECONDS
[ -s $S/gpt2_hf.onnx ] || timeout 120 python3 grid_search/results/graph_zoo_4gpu/export_hf_gpt2.py $S/gpt2_hf.onnx >> "$L" 2>&1
[ -s $S/bert.onnx ] || timeout 120 python3 grid_search/results/zoo_host_4gpu/export.py bert $S/bert.onnx >> "$L" 2>&1
[ -s $S/resnet50.onnx ] || PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 120 python3 grid_search/results/zoo_host_4gpu/export.py resnet50 $S/resnet50.onnx >> "$L" 2>&1
echo "### exports after $((SECONDS - s)) s" >> "$L"
G="python3 -m distir grid-search --devices 2 --fewer-devices --hardware $HW-graph --max-microbatches 8 --schedules 1f1b gpipe --run-top 20 --cuda-graph"
run() {  # name timeout args...
  local name=$1 t=$2; shift 2
  local s=$SECONDS
  timeout -s INT -k 20 "$t" $G "$@" -o "$OUT/$name.csv" >> "$L" 2>&1
  echo "### $name rc $? after $((SECONDS - s)) s" >> "$L"
}
run bert_b16_graph 150 --model $S/bert.onnx --dim batch=16 --dim seq=512 --train --loss mse --optimizer adam
run resnet50_b64_graph 120 --model $S/resnet50.onnx --dim batch=64 --train --loss cross_entropy --optimizer sgd
run hf_gpt2_b8_graph 150 --model $S/gpt2_hf.onnx --dim batch=8 --dim seq=512 --train --loss cross_entropy --optimizer adam
uptime >> "$L"
rm -f "$OUT"/*.png
grep -v "^\s*File\|^    \|configurations, .* elapsed" "$L" | grep "###\|measured D\|batch .*Spearman\|rror\|not measured" | tail -80
