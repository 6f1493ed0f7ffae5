#!/bin/bash
# 2 GPUs (2 x H200 here). **Sealed** (written to $OUT/sealed.tgz only, printed nowhere):
# HF ALBERT-base (12 layers sharing one layer's weights) at 8 and 16 sequences of 512,
# HF DINOv2 ViT-B/14 at 32 and 64 images, HF MobileBERT at 16 and 32 sequences of 512
# (export.py), float32 training steps (Adam; MSE against the hidden states for the text
# models, cross entropy for DINOv2), every configuration of <= 2 GPUs replayed, measured
# with the runner's inputs drawn as a training step holds them (5950e14) and Adam's
# replayed-sequence fit.
# Run from the project root, $OUT set, COMMIT holding the commit.
R=grid_search/results/adam_step
source grid_search/results/sealed_lib.sh
sealed_begin run_b 2 20
for m in albert dinov2 mobilebert; do sealed_export $m $R/export.py & done; wait
TXT="--train --loss mse --optimizer adam --dim seq=512"
sealed_search albert_b8 90 --model $S/albert.onnx --dim batch=8 $TXT
sealed_search albert_b16 90 --model $S/albert.onnx --dim batch=16 $TXT
sealed_search dinov2_b32 90 --model $S/dinov2.onnx --dim batch=32 $IMG
sealed_search dinov2_b64 100 --model $S/dinov2.onnx --dim batch=64 $IMG
sealed_search mobilebert_b16 90 --model $S/mobilebert.onnx --dim batch=16 $TXT
sealed_search mobilebert_b32 90 --model $S/mobilebert.onnx --dim batch=32 $TXT
sealed_end
grep "###\|rror" "$L" | tail -20
