#!/bin/bash
# 1 GPU. SqueezeBERT's kernel-1 1-D convolutions, cuDNN against grouped products
# (conv_k1_probe.py). Run from the project root, $OUT set, COMMIT holding the commit.
echo "### project commit $(cat COMMIT)" > $OUT/run_h.log
nvidia-smi -L >> $OUT/run_h.log
timeout 60 python3 grid_search/results/adam_step/conv_k1_probe.py > $OUT/conv_k1_probe.txt 2>> $OUT/run_h.log
cat $OUT/conv_k1_probe.txt; tail -3 $OUT/run_h.log
timeout 60 python3 grid_search/results/adam_step/rsub_probe.py > $OUT/rsub_probe.txt 2>> $OUT/run_h.log
cat $OUT/rsub_probe.txt; tail -3 $OUT/run_h.log
