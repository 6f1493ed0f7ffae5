#!/bin/bash
# 1 GPU (1 x H200 here). The Conformer's float32 products alone (product_probe.py).
# Run from the project root, $OUT set, COMMIT holding the commit.
echo "### project commit $(cat COMMIT)" > $OUT/run_g.log
nvidia-smi -L >> $OUT/run_g.log
timeout 90 python3 grid_search/results/conv1d_tokens/product_probe.py > $OUT/product_probe.txt 2>> $OUT/run_g.log
cat $OUT/product_probe.txt; tail -3 $OUT/run_g.log
