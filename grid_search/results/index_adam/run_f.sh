#!/bin/bash
# 1 GPU (1 x H200 here): conv_cliff.py (SEW-D's positional convolution and its gradient
# by batch size, cuDNN's heuristics against its benchmark mode). Run from the project
# root, $OUT set.
set -u
nvidia-smi -L > $OUT/conv_cliff.txt
timeout 200 python3 grid_search/results/index_adam/conv_cliff.py >> $OUT/conv_cliff.txt 2>&1
echo "rc $?" >> $OUT/conv_cliff.txt
cat $OUT/conv_cliff.txt
