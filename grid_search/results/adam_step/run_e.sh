#!/bin/bash
# 2 GPUs (2 x H200 here). HF wav2vec 2.0 base (../index_adam/export.py wav2vec2), sealed
# last session (../index_adam/ call H: its rows ran Adam at the speed of random moments),
# measured again on its own weights and a training step's optimizer state (5950e14,
# 08c73f6), at 8 and 16 clips, every configuration of <= 2 GPUs replayed.
# Run from the project root, $OUT set, COMMIT holding the commit.
source grid_search/results/sealed_lib.sh
sealed_begin run_e 2 20
sealed_export wav2vec2 grid_search/results/index_adam/export.py
AUD="--train --loss mse --optimizer adam"
sealed_search wav2vec2_b8_graph 110 --model $S/wav2vec2.onnx --dim batch=8 $AUD
sealed_search wav2vec2_b16_graph 120 --model $S/wav2vec2.onnx --dim batch=16 $AUD
sealed_end
grep "###\|rror" "$L" | tail -20
