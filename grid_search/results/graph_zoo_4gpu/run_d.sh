#!/bin/bash
# Call D (4 GPUs): a model we did not write, through the main job on real GPUs. Hugging Face's
# GPT2LMHeadModel (12 x 768, vocabulary 50257, random weights) exported here with torch's
# dynamo exporter, then `distir grid-search --model` on its training step (cross entropy,
# Adam; batch 16 x 512 tokens, float32) at 4 devices, every configuration run for real:
# replayed as CUDA graphs, then eagerly; and its inference at the same batch, as graphs.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_d.log
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
D=grid_search/results/graph_zoo_4gpu
M=/tmp/gpt2_hf.onnx
s=$SECONDS
timeout 120 python3 $D/export_hf_gpt2.py $M >> "$L" 2>&1
echo "### export rc $? after $((SECONDS - s)) s" >> "$L"
G="python3 -m distir grid-search --model $M --dim batch=16 --dim seq=512 --devices 4 \
   --hardware h200-sxm --max-microbatches 4 --run-top 9"
T="--train --loss cross_entropy --optimizer adam"
s=$SECONDS
timeout -s INT -k 20 200 $G $T --cuda-graph -o "$OUT/hf_gpt2_train_graph.csv" >> "$L" 2>&1
echo "### train graph rc $? after $((SECONDS - s)) s" >> "$L"
s=$SECONDS
timeout -s INT -k 20 150 $G $T -o "$OUT/hf_gpt2_train_eager.csv" >> "$L" 2>&1
echo "### train eager rc $? after $((SECONDS - s)) s" >> "$L"
s=$SECONDS
timeout -s INT -k 20 90 $G --cuda-graph -o "$OUT/hf_gpt2_infer_graph.csv" >> "$L" 2>&1
echo "### inference graph rc $? after $((SECONDS - s)) s" >> "$L"
uptime >> "$L"
grep -v "configurations, .* elapsed" "$L" | tail -60
