#!/bin/bash
# 1 GPU (1 x H200 here): adam_probe.py (why an Adam update is slower in a replayed step
# than in the calibration's sequence). Run from the project root, $OUT set.
set -u
nvidia-smi -L > $OUT/adam_probe.txt
timeout 200 python3 grid_search/results/index_adam/adam_probe.py >> $OUT/adam_probe.txt 2>&1
echo "rc $?" >> $OUT/adam_probe.txt
cat $OUT/adam_probe.txt
