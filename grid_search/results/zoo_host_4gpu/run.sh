#!/bin/bash
# 4 GPUs, one lease. On 4 x H100: the held-out replayed study of ../passes_4gpu/ (its run.sh).
# On another card: models we did not write through the main job (`distir grid-search
# --run-top 9`, every configuration of 4 devices simulated with h200-sxm, then run for real),
# their training steps, float32:
#   - Hugging Face GPT2LMHeadModel 12 x 768 (dynamo export, ../graph_zoo_4gpu/), batch 16 x
#     512, cross entropy, Adam: eagerly, twice (the host cost of each step measured, as
#     run_top does for eager steps since the last session);
#   - Hugging Face BertModel 12 x 768 (torchscript export, input_ids and attention_mask),
#     batch 32 x 512, mse, Adam: replayed as CUDA graphs, then eagerly;
#   - torchvision's ResNet-50 layout at base width 64 (torchscript export), batch 128 x 3 x
#     224 x 224, cross entropy, SGD: replayed, then eagerly.
# Run from the project root, $OUT set.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run.log
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H100*) exec bash grid_search/results/passes_4gpu/run.sh ;;
esac
R=grid_search/results/zoo_host_4gpu
S=/tmp/zoo; mkdir -p $S
s=$SECONDS
timeout 120 python3 grid_search/results/graph_zoo_4gpu/export_hf_gpt2.py $S/gpt2_hf.onnx >> "$L" 2>&1
timeout 120 python3 $R/export.py bert $S/bert.onnx >> "$L" 2>&1
PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 120 python3 $R/export.py resnet50 $S/resnet50.onnx >> "$L" 2>&1
echo "### exports after $((SECONDS - s)) s" >> "$L"
G="python3 -m distir grid-search --devices 4 --hardware h200-sxm --max-microbatches 4 --run-top 9"
run() {  # name timeout args...
  local name=$1 t=$2; shift 2
  local s=$SECONDS
  timeout -s INT -k 20 "$t" $G "$@" -o "$OUT/$name.csv" >> "$L" 2>&1
  echo "### $name rc $? after $((SECONDS - s)) s" >> "$L"
}
GPT="--model $S/gpt2_hf.onnx --dim batch=16 --dim seq=512 --train --loss cross_entropy --optimizer adam"
BERT="--model $S/bert.onnx --dim batch=32 --dim seq=512 --train --loss mse --optimizer adam"
RN="--model $S/resnet50.onnx --dim batch=128 --train --loss cross_entropy --optimizer sgd"
run hf_gpt2_train_eager 80 $GPT
run hf_gpt2_train_eager_r2 80 $GPT
run bert_train_graph 70 $BERT --cuda-graph
run bert_train_eager 80 $BERT
run resnet50_train_graph 70 $RN --cuda-graph
run resnet50_train_eager 80 $RN
uptime >> "$L"
grep -v "^\s*File\|^    \|configurations, .* elapsed" "$L" | grep "###\|measured D\|batch .*Spearman\|rror" | tail -80
