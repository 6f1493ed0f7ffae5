#!/bin/bash
# 1 GPU (1 x H200 here). sustained_probe.py: kernels in a burst and after 2 s of load.
# Run from the project root, $OUT set, COMMIT holding the commit.
echo "### project commit $(cat COMMIT)" > $OUT/run_f.log
nvidia-smi -L >> $OUT/run_f.log
nvidia-smi --query-gpu=clocks.max.sm,clocks.sm,power.limit,temperature.gpu --format=csv >> $OUT/run_f.log
timeout 150 python3 grid_search/results/strided_reduce/sustained_probe.py > $OUT/sustained_probe.txt 2>> $OUT/run_f.log
echo "### rc $?" >> $OUT/run_f.log
cat $OUT/sustained_probe.txt; tail -5 $OUT/run_f.log
