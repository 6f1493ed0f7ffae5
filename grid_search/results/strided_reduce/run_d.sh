#!/bin/bash
# 1 GPU (1 x H200 here). concat_probe.py: a relative-position shift's concatenations,
# rank 4 as exported and with leading axes merged, zero part expanded or contiguous.
# Run from the project root, $OUT set, COMMIT holding the commit.
echo "### project commit $(cat COMMIT)" > $OUT/run_d.log
nvidia-smi -L >> $OUT/run_d.log
timeout 120 python3 grid_search/results/strided_reduce/concat_probe.py > $OUT/concat_probe.txt 2>> $OUT/run_d.log
echo "### rc $?" >> $OUT/run_d.log
cat $OUT/concat_probe.txt; tail -3 $OUT/run_d.log
