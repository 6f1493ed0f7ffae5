#!/bin/bash
# 2 GPUs (2 x H200 here). **Sealed** (written to $OUT/sealed.tgz only, printed nowhere):
# HF DeBERTa-v2 at DeBERTa-v3-base's sizes (torchscript; disentangled attention over
# relative positions, distributable since this commit) at 8 and 16 sequences of 512 tokens
# (MSE against the hidden states, Adam), and HF Hiera-B (dynamo) at 64 and 128 images
# (cross entropy, Adam); float32 training steps, every configuration of <= 2 GPUs
# replayed; the skeletons of the exports. Open the archive only after the comparison's
# commit is named in the README. Run from the project root, $OUT set, COMMIT holding the
# commit.
R=grid_search/results/norms_views
source grid_search/results/sealed_lib.sh
sealed_begin run_c 2 20
s=$SECONDS
sealed_export deberta $R/export.py &
sealed_export hiera $R/export.py &
wait
echo "### exports done after $((SECONDS - s)) s" >> "$L"
TOK="--dim seq=512 --train --loss mse --optimizer adam"
sealed_search deberta_b8_graph 110 --model $S/deberta.onnx --dim batch=8 $TOK
sealed_search deberta_b16_graph 130 --model $S/deberta.onnx --dim batch=16 $TOK
sealed_search hiera_b64_graph 120 --model $S/hiera.onnx --dim batch=64 $IMG
sealed_search hiera_b128_graph 130 --model $S/hiera.onnx --dim batch=128 $IMG
sealed_end
grep "###\|rror" "$L" | tail -20
