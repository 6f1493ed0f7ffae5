#!/bin/bash
# The overlap of an asynchronous all-reduce with matrix products (calibration.overlap), on
# every GPU of the machine, eager and replayed as CUDA graphs, side by side in one call.
# Run from the project root, $OUT set.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run.log
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"
for i in 1 2; do
  timeout -s INT -k 20 120 python3 -m calibration.overlap --json "$OUT/eager_$i.json" >> "$L" 2>&1
  echo "### eager $i rc $?" >> "$L"
  timeout -s INT -k 20 120 python3 -m calibration.overlap --cuda-graph --json "$OUT/graph_$i.json" >> "$L" 2>&1
  echo "### graph $i rc $?" >> "$L"
done
timeout -s INT -k 20 120 python3 -m pytest -q -p no:cacheprovider tests/calibration/test_overlap.py >> "$L" 2>&1
echo "### test rc $?" >> "$L"
cat "$L"
