#!/bin/bash
# 2 GPUs (2 x H200 here). **Sealed** (written to $OUT/sealed.tgz only, printed nowhere):
# HF WavLM base again (export.py wavlm), at 8 and 16 clips, every configuration of <= 2
# GPUs replayed, after the pipeline transform stopped refusing its P2 configurations
# (3914847: a gradient sharded in groups along the data axis, gathered over microbatches).
# Run from the project root, $OUT set, COMMIT holding the commit.
R=grid_search/results/index_adam
source grid_search/results/sealed_lib.sh
sealed_begin run_i 2 20
sealed_export wavlm $R/export.py
AUD="--train --loss mse --optimizer adam"
sealed_search wavlm_b8_graph 100 --model $S/wavlm.onnx --dim batch=8 $AUD
sealed_search wavlm_b16_graph 110 --model $S/wavlm.onnx --dim batch=16 $AUD
sealed_end
grep "###\|rror" "$L" | tail -20
