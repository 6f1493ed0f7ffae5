#!/bin/bash
# Call A, 2 GPUs (asked for as H100s; the card that came is named in run_a.log).
#  1. On H100s only: the held-out replayed study of ../passes_2gpu/ (its run.sh as it is,
#     its CSVs under $OUT/heldout/): the held-out GPT-2 12 x 2560, bfloat16, training and
#     inference, every D*T*P <= 2, replayed as CUDA graphs.
#  2. On any card: models we did not write through the main job, their float32 training
#     steps replayed as CUDA graphs (`distir grid-search --devices 2 --fewer-devices
#     --schedules 1f1b gpipe --max-microbatches 8 --cuda-graph --run-top 20`, so every
#     configuration that fits is run), simulated with the card's device-time profile
#     (h100-sxm-graph or h200-sxm-graph): Hugging Face BertModel 12 x 768 (torchscript,
#     batch 32 x 512, mse, Adam), torchvision's ResNet-50 layout (torchscript, batch 128,
#     cross entropy, SGD), Hugging Face GPT2LMHeadModel 12 x 768 (dynamo, batch 16 x 512,
#     cross entropy, Adam).
# Run from the project root, $OUT set.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_a.log
R=grid_search/results/zoo_2gpu
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;;
  *) HW=h100-sxm
     mkdir -p "$OUT/heldout"
     s=$SECONDS
     OUT=$OUT/heldout bash grid_search/results/passes_2gpu/run.sh > /dev/null 2>&1
     echo "### held-out study rc $? after $((SECONDS - s)) s" >> "$L" ;;
esac
echo "### zoo profile $HW-graph" >> "$L"
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
left() { local t=$(( ${DEADLINE:-570} - SECONDS )); echo $(( t > 30 ? t : 30 )); }
run bert_b32_graph $(( $(left) / 3 )) --model $S/bert.onnx --dim batch=32 --dim seq=512 --train --loss mse --optimizer adam
run resnet50_b128_graph $(( $(left) / 2 )) --model $S/resnet50.onnx --dim batch=128 --train --loss cross_entropy --optimizer sgd
run hf_gpt2_b16_graph $(left) --model $S/gpt2_hf.onnx --dim batch=16 --dim seq=512 --train --loss cross_entropy --optimizer adam
uptime >> "$L"
(cd "$OUT" && tar czf zoo_a.tgz *.csv heldout 2>/dev/null && rm -f *.csv *.png && rm -rf heldout)
grep -v "^\s*File\|^    \|configurations, .* elapsed" "$L" | grep "###\|measured D\|batch .*Spearman\|rror\|not measured" | tail -80
