#!/bin/bash
# Call D, 2 GPUs of either kind, after the backend's index_add for an adding ScatterND of few
# rows (the gradient of nn.MultiheadAttention's query / key / value Gathers) and its cost
# rule: torchvision's ViT-B/16 structure at batch 32 and nn.TransformerEncoder at 8 x 512,
# every configuration of <= 2 GPUs, replayed, as calls A-B ran them (no longer held out:
# call C's explanations of their sealed rows led to the change).
# Run from the project root, $OUT set.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_d.log
R=grid_search/results/zoo_more_2gpu
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
S=/tmp/zoo; mkdir -p $S
for m in tvit encoder; do
  [ -s $S/$m.onnx ] || PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 60 python3 $R/export.py $m $S/$m.onnx >> "$L" 2>&1 &
done
wait
G="python3 -m distir grid-search --devices 2 --fewer-devices --hardware $HW-graph --max-microbatches 8 --schedules 1f1b gpipe --run-top 20 --cuda-graph"
s=$SECONDS
timeout -s INT -k 10 75 $G --model $S/tvit.onnx --dim batch=32 --train --loss cross_entropy \
    --optimizer adam -o $OUT/tvit_b32_graph.csv >> "$L" 2>&1
echo "### tvit_b32_graph rc $? after $((SECONDS - s)) s" >> "$L"
s=$SECONDS
timeout -s INT -k 10 75 $G --model $S/encoder.onnx --dim batch=8 --dim seq=512 --train \
    --loss mse --optimizer adam -o $OUT/encoder_b8_graph.csv >> "$L" 2>&1
echo "### encoder_b8_graph rc $? after $((SECONDS - s)) s" >> "$L"
rm -f $OUT/*.png
grep -v "^\s*File\|^    \|configurations, .* elapsed" "$L" | grep "###\|measured D\|batch .*Spearman\|slowed\|rror" | tail -40
