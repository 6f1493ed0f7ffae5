#!/bin/bash
# 2 GPUs (2 x H200 here). After 08c73f6 (real runs on the model's own weights): HF
# MobileBERT's search measured again at 16 and 32 sequences of 512 (call B's rows of it
# ran on NaN: its random weights overflow), every configuration of <= 2 GPUs replayed;
# then tile_probe.py (DINOv2's products at 1028 / 2056 / 4112 rows against 1024 / ...).
# No cost-model change has looked at MobileBERT's rows. Run from the project root, $OUT
# set, COMMIT holding the commit.
R=grid_search/results/adam_step
source grid_search/results/sealed_lib.sh
sealed_begin run_d 2 20
sealed_export mobilebert $R/export.py
TXT="--train --loss mse --optimizer adam --dim seq=512"
sealed_search mobilebert_b16_graph 170 --model $S/mobilebert.onnx --dim batch=16 $TXT
sealed_search mobilebert_b32_graph 170 --model $S/mobilebert.onnx --dim batch=32 $TXT
sealed_end
CUDA_VISIBLE_DEVICES=0 timeout 90 python3 $R/tile_probe.py > $OUT/tile_probe.txt 2>> "$L"
grep "###\|rror" "$L" | tail -20; cat $OUT/tile_probe.txt
