#!/bin/bash
# 2 GPUs (2 x H200 here). **Sealed** (written to $OUT/sealed.tgz only, printed nowhere):
# HF SqueezeBERT (export.py squeezebert: grouped 1-D convolutions of kernel 1 as its
# projections) at 16 and 32 sequences of 512 (MSE against the hidden states, Adam),
# float32, every configuration of <= 2 GPUs replayed, on its own weights (08c73f6).
# Run from the project root, $OUT set, COMMIT holding the commit.
R=grid_search/results/adam_step
source grid_search/results/sealed_lib.sh
sealed_begin run_f 2 20
sealed_export squeezebert $R/export.py
TXT="--train --loss mse --optimizer adam --dim seq=512"
sealed_search squeezebert_b16_graph 100 --model $S/squeezebert.onnx --dim batch=16 $TXT
sealed_search squeezebert_b32_graph 110 --model $S/squeezebert.onnx --dim batch=32 $TXT
sealed_end
grep "###\|rror" "$L" | tail -20
