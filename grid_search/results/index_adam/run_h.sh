#!/bin/bash
# 2 GPUs (2 x H200 here). **Sealed** (written to $OUT/sealed.tgz only, printed nowhere):
# HF wav2vec 2.0 base and HF WavLM base (default configs, 64,000 samples of audio;
# dynamo) at 8 and 16 clips (MSE against the hidden states, Adam), float32 training
# steps, every configuration of <= 2 GPUs replayed; the skeletons of the exports. Open the
# archive only after the comparison's commit is named in the README.
# Run from the project root, $OUT set, COMMIT holding the commit.
R=grid_search/results/index_adam
source grid_search/results/sealed_lib.sh
sealed_begin run_h 2 20
sealed_export wav2vec2 $R/export.py &
sealed_export wavlm $R/export.py &
wait
AUD="--train --loss mse --optimizer adam"
sealed_search wav2vec2_b8_graph 90 --model $S/wav2vec2.onnx --dim batch=8 $AUD
sealed_search wav2vec2_b16_graph 100 --model $S/wav2vec2.onnx --dim batch=16 $AUD
sealed_search wavlm_b8_graph 90 --model $S/wavlm.onnx --dim batch=8 $AUD
sealed_search wavlm_b16_graph 100 --model $S/wavlm.onnx --dim batch=16 $AUD
sealed_end
grep "###\|rror" "$L" | tail -20
