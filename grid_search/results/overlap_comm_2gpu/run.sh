#!/bin/bash
# Is the collective itself slowed by compute beside it? calibration.overlap with the compute
# shorter than the all-reduce (--ratio 0.4) and, for reference, longer (2.5), beside products
# and a bandwidth-bound kernel, replayed as CUDA graphs and eager, alternated twice.
# Run from the project root, $OUT set.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run.log
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"
for i in 1 2; do
  for g in "" "--cuda-graph"; do
    m=eager; [ -n "$g" ] && m=graph
    for r in 0.4 2.5; do
      n=r${r}_${m}_$i
      timeout -s INT -k 20 100 python3 -m calibration.overlap --memory --ratio $r $g \
          --json "$OUT/$n.json" >> "$L" 2>&1
      echo "### $n rc $?" >> "$L"
    done
  done
done
grep -v "Warning\|return func\|Guessing" "$L"
