#!/bin/bash
# Call D, for a later session (not run yet), 2 GPUs of any kind: what the backend's
# compiled-in small operands (`lowering.known_inputs`, after calls A-C) change, and the one
# float32 model whose miss is not explained yet.
#  1. HF GPT-2 12 x 768 at batch 8 x 512 and ViT 12 x 768 at batch 32 again, as run_b.sh and
#     run_c.sh ran them (every configuration of <= 2 GPUs, replayed), with the card's
#     device-time profile: their rows beside calls B and C's show what the change did on a
#     GPU (GELU's `Pow`, the mask's `Where`, the scalar `Mul`s), with clocks recorded;
#  2. `distir explain` of ViT's one-GPU step at batch 32 (7.5% too fast on 2 x H200,
#     83% of it products; its 197-token attention products are the suspect).
# Run from the project root, $OUT set.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_d.log
R=grid_search/results/zoo_2gpu
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
S=/tmp/zoo; W=/tmp/zoo/x; mkdir -p $S $W
[ -s $S/gpt2_hf.onnx ] || timeout 120 python3 grid_search/results/graph_zoo_4gpu/export_hf_gpt2.py $S/gpt2_hf.onnx >> "$L" 2>&1
[ -s $S/vit.onnx ] || timeout 120 python3 $R/export.py vit $S/vit.onnx >> "$L" 2>&1
G="python3 -m distir grid-search --devices 2 --fewer-devices --hardware $HW-graph --max-microbatches 8 --schedules 1f1b gpipe --run-top 20 --cuda-graph"
s=$SECONDS
timeout -s INT -k 20 150 $G --model $S/gpt2_hf.onnx --dim batch=8 --dim seq=512 --train \
    --loss cross_entropy --optimizer adam -o $OUT/hf_gpt2_b8_graph.csv >> "$L" 2>&1
echo "### hf_gpt2_b8_graph rc $? after $((SECONDS - s)) s" >> "$L"
s=$SECONDS
timeout -s INT -k 20 120 $G --model $S/vit.onnx --dim batch=32 --train --loss mse \
    --optimizer adam -o $OUT/vit_b32_graph.csv >> "$L" 2>&1
echo "### vit_b32_graph rc $? after $((SECONDS - s)) s" >> "$L"
D="python3 -m distir"
s=$SECONDS
timeout 150 $D import $S/vit.onnx --dim batch=32 --train --loss mse --optimizer adam \
    -o $W/vit.dir >> "$L" 2>&1
timeout -s INT -k 20 100 $D run $W/vit.dir --profile $W/vit.eager >> "$L" 2>&1
timeout -s INT -k 20 100 $D run $W/vit.dir --cuda-graph --profile $W/vit.graph >> "$L" 2>&1
timeout 150 $D explain $W/vit.eager --replay $W/vit.graph --program $W/vit.dir \
    --hardware $HW-graph --top 40 > $OUT/vit_d1_b32.explain.txt 2>&1
echo "### explain vit rc $? after $((SECONDS - s)) s" >> "$L"
rm -f $OUT/*.png
grep -v "^\s*File\|^    \|configurations, .* elapsed" "$L" | grep "###\|measured D\|batch .*Spearman\|slowed\|rror" | tail -40
head -30 $OUT/vit_d1_b32.explain.txt
