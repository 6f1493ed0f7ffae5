#!/bin/bash
# 2 GPUs (2 x H200 here). **Sealed** (written to $OUT/sealed.tgz only, printed nowhere):
# HF SEW-D (default config, 64,000 samples of audio; dynamo) at 8 and 16 clips (MSE
# against the hidden states, Adam), HF EfficientNet-B0 (dynamo) at 64 and 128 images
# (cross entropy, Adam), float32 training steps, every configuration of <= 2 GPUs
# replayed; the skeletons of the exports. The models are those run_a.sh exported when
# this call finds them (the same machine), else exported here. Open the archive only
# after the comparison's commit is named in the README.
# Run from the project root, $OUT set, COMMIT holding the commit.
R=grid_search/results/index_adam
source grid_search/results/sealed_lib.sh
sealed_begin run_b 2 20
for m in sewd efficientnet; do
  if [ -s "$S/$m.onnx" ]; then
    echo "### $m: run_a.sh's export" >> "$L"
    python3 -m grid_search.skeleton strip "$S/$m.onnx" "$OUT/skel/$m.skel.onnx" >> "$L" 2>&1
  else
    sealed_export $m $R/export.py &
  fi
done
wait
AUD="--train --loss mse --optimizer adam"
sealed_search sewd_b8_graph 110 --model $S/sewd.onnx --dim batch=8 $AUD
sealed_search sewd_b16_graph 120 --model $S/sewd.onnx --dim batch=16 $AUD
sealed_search efficientnet_b64_graph 110 --model $S/efficientnet.onnx --dim batch=64 $IMG
sealed_search efficientnet_b128_graph 140 --model $S/efficientnet.onnx --dim batch=128 $IMG
sealed_end
grep "###\|rror" "$L" | tail -20
