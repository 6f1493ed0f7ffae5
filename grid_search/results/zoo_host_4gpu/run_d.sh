#!/bin/bash
# Call D (4 GPUs): the embedding gradient's new kernel. Call C's explanation of BERT T4 put
# 10.7 ms of its 111.8 ms step in one ScatterND (the token-type gradient: 16,384 rows into
# row 0, serial in an accumulating index_put_); the backend now runs an adding ScatterND of
# rows as PyTorch's embedding backward. Here: the scatter-add microbenchmarks again through
# the new lowering (`python -m calibration.bench_matmul_grad --only scatter`, device time),
# then BERT T4, D2 x T2 and D4 replayed and eagerly (the same configurations as call A).
# Run from the project root, $OUT set.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_d.log
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"
R=grid_search/results/zoo_host_4gpu
S=/tmp/zoo; W=/tmp/zoo/x; mkdir -p $S $W
D="python3 -m distir"
s=$SECONDS
timeout -s INT -k 20 150 python3 -m calibration.bench_matmul_grad --only scatter \
    -o $OUT/scatter.measurements.csv >> "$L" 2>&1
echo "### scatter bench rc $? after $((SECONDS - s)) s" >> "$L"
timeout 120 python3 $R/export.py bert $S/bert.onnx >> "$L" 2>&1
timeout 200 $D import $S/bert.onnx --dim batch=32 --dim seq=512 --train --loss mse --optimizer adam \
    -o $S/bert.dir >> "$L" 2>&1
for c in "t4 1 4" "d2t2 2 2" "d4 4 1"; do
  set -- $c
  s=$SECONDS
  timeout 120 $D transform $S/bert.dir --dp $2 --tp $3 --hardware h200-sxm -o $W/$1.dir >> "$L" 2>&1
  echo "### bert $1" >> "$L"
  timeout -s INT -k 20 100 $D run $W/$1.dir --cuda-graph >> "$L" 2>&1
  timeout -s INT -k 20 100 $D run $W/$1.dir >> "$L" 2>&1
  echo "### bert $1 rc $? after $((SECONDS - s)) s" >> "$L"
done
grep "###\|step latency\|wrote" "$L"
