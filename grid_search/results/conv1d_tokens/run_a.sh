#!/bin/bash
# 2 GPUs (2 x H200 here). (1) The 1-D convolution families, measurements only, float32,
# device time: `conv1d*` (contiguous inputs) on GPU 0 and `conv1d_nwc*` (transposed token
# tensors) on GPU 1 at once, each on its own card, 320 shapes x 3 (conv1d_shapes: speech
# models' layers and, since this call, kernel-1 projections over tokens). (2) **Sealed**
# (written to $OUT/sealed.tgz only, printed nowhere): HF ConvBERT-base (adam_step/export.py
# convbert) at 16 and 32 sequences of 512 (MSE against the hidden states, Adam), float32,
# every configuration of <= 2 GPUs replayed, on its own weights.
# Run from the project root, $OUT set, COMMIT holding the commit.
source grid_search/results/sealed_lib.sh
sealed_begin run_a 2 20
mkdir -p $OUT/cal
s=$SECONDS
CAL="python3 -m calibration --base $HW --device-time --no-comm --devices 1 --dtypes Float32 --measure-only"
CUDA_VISIBLE_DEVICES=0 timeout 300 $CAL -o $OUT/cal/$HW-graph-conv1d.json \
  --families conv1d conv1d_dgrad conv1d_wgrad > $OUT/cal/conv1d.log 2>&1 &
CUDA_VISIBLE_DEVICES=1 timeout 300 $CAL -o $OUT/cal/$HW-graph-conv1d-nwc.json \
  --families conv1d_nwc conv1d_nwc_dgrad conv1d_nwc_wgrad > $OUT/cal/conv1d_nwc.log 2>&1 &
wait
echo "### conv1d families after $((SECONDS - s)) s" >> "$L"
tail -2 $OUT/cal/*.log >> "$L"
sealed_export convbert grid_search/results/adam_step/export.py
TXT="--train --loss mse --optimizer adam --dim seq=512"
sealed_search convbert_b16_graph 100 --model $S/convbert.onnx --dim batch=16 $TXT
sealed_search convbert_b32_graph 140 --model $S/convbert.onnx --dim batch=32 $TXT
sealed_end
grep "###\|rror" "$L" | tail -20
