#!/bin/bash
# Call E (4 GPUs, asked for as H100s). On 4 x H100: the held-out replayed study of
# ../passes_4gpu/ (its run.sh, as it is). On another card: run.sh's BERT and ResNet-50
# training steps again, replayed, every configuration of 4 devices that fits (`--run-top 9`),
# with the programs dtp writes now (ResNet-50's 4 stages cut by partition.LAYER_SLACK; BERT
# on the backend's embedding gradient since call D), simulated with h200-sxm-graph.
# Run from the project root, $OUT set.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_e.log
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H100*) exec bash grid_search/results/passes_4gpu/run.sh ;;
esac
R=grid_search/results/zoo_host_4gpu
S=/tmp/zoo; mkdir -p $S
s=$SECONDS
timeout 120 python3 $R/export.py bert $S/bert.onnx >> "$L" 2>&1
PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 120 python3 $R/export.py resnet50 $S/resnet50.onnx >> "$L" 2>&1
echo "### exports after $((SECONDS - s)) s" >> "$L"
G="python3 -m distir grid-search --devices 4 --hardware h200-sxm-graph --max-microbatches 4 --run-top 9 --cuda-graph"
run() {  # name timeout args...
  local name=$1 t=$2; shift 2
  local s=$SECONDS
  timeout -s INT -k 20 "$t" $G "$@" -o "$OUT/$name.csv" >> "$L" 2>&1
  echo "### $name rc $? after $((SECONDS - s)) s" >> "$L"
}
run resnet50_train_graph 110 --model $S/resnet50.onnx --dim batch=128 --train --loss cross_entropy --optimizer sgd
run bert_train_graph 120 --model $S/bert.onnx --dim batch=32 --dim seq=512 --train --loss mse --optimizer adam
rm -f "$OUT"/*.png
uptime >> "$L"
grep -v "^\s*File\|^    \|configurations, .* elapsed" "$L" | grep "###\|measured D\|batch .*Spearman\|rror\|not measured" | tail -60
