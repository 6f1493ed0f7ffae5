#!/bin/bash
# Call F, 2 GPUs of either kind, after the backend's Transpose that moves only axes of length
# 1 became a reshape with contiguous strides (call E: nn.MultiheadAttention's (1, 512, 768)
# -> (512, 1, 768) in a microbatch of one sequence kept the moved axis's stride, and
# torch.matmul ran one matrix-vector product per row, 8x the product): nn.TransformerEncoder
# at 8 x 512, every configuration of <= 2 GPUs replayed as call D ran them, then its P2 x K8
# explained again.
# Run from the project root, $OUT set.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_f.log
R=grid_search/results/zoo_more_2gpu
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
S=/tmp/zoo; W=/tmp/zoo/f; mkdir -p $S $W
PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 60 python3 $R/export.py encoder $S/encoder.onnx >> "$L" 2>&1
G="python3 -m distir grid-search --devices 2 --fewer-devices --hardware $HW-graph --max-microbatches 8 --schedules 1f1b gpipe --run-top 20 --cuda-graph"
s=$SECONDS
timeout -s INT -k 10 90 $G --model $S/encoder.onnx --dim batch=8 --dim seq=512 --train \
    --loss mse --optimizer adam -o $OUT/encoder_b8_graph.csv >> "$L" 2>&1
echo "### encoder_b8_graph rc $? after $((SECONDS - s)) s" >> "$L"
s=$SECONDS
timeout -s INT -k 10 100 python3 -m grid_search.study explain --hardware $HW-graph --cuda-graph \
    --steps 10 --warmup 3 --top 40 --train --optimizer adam --model $S/encoder.onnx \
    --dim batch=8 --dim seq=512 --loss mse --batch-size 8 --pp 2 --microbatches 8 \
    --schedule 1f1b -o $W/encoder_p2k8 > /dev/null 2>> "$L"
echo "### encoder_p2k8 rc $? after $((SECONDS - s)) s" >> "$L"
cp $W/encoder_p2k8/explain.txt $OUT/encoder_p2k8.explain.txt
rm -f $OUT/*.png
grep -v "^\s*File\|^    \|configurations, .* elapsed" "$L" | grep "###\|measured D\|rror" | tail -20
head -24 $OUT/encoder_p2k8.explain.txt
