#!/bin/bash
# Call C (4 GPUs): call B's explanations again, its `distir explain` having failed on its own
# command line (`--replay DIR2 DIR` took DIR as a replay trace; --replay takes one path since).
# BERT T4 (17% slower than predicted) and ResNet-50 P4 x K2 and D2 x P2 x K4 (14-16% and 10%
# faster), each run eagerly with every op marked and replayed as a CUDA graph, explained
# against h200-sxm-graph. Run from the project root, $OUT set.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_c.log
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"
R=grid_search/results/zoo_host_4gpu
S=/tmp/zoo; W=/tmp/zoo/x; mkdir -p $S $W
D="python3 -m distir"
timeout 120 python3 $R/export.py bert $S/bert.onnx >> "$L" 2>&1
PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 120 python3 $R/export.py resnet50 $S/resnet50.onnx >> "$L" 2>&1
timeout 200 $D import $S/bert.onnx --dim batch=32 --dim seq=512 --train --loss mse --optimizer adam \
    -o $S/bert.dir >> "$L" 2>&1
timeout 200 $D import $S/resnet50.onnx --dim batch=128 --train --loss cross_entropy --optimizer sgd \
    -o $S/resnet50.dir >> "$L" 2>&1
for c in "resnet50 p4k2 1 1 4 2" "resnet50 d2p2k4 2 1 2 4" "bert t4 1 4 1 1"; do
  set -- $c
  s=$SECONDS; n=$1_$2
  timeout 120 $D transform $S/$1.dir --dp $3 --tp $4 --pp $5 -k $6 --hardware h200-sxm \
      -o $W/$n.dir >> "$L" 2>&1
  timeout -s INT -k 20 120 $D run $W/$n.dir --profile $W/$n.eager >> "$L" 2>&1
  timeout -s INT -k 20 120 $D run $W/$n.dir --cuda-graph --profile $W/$n.graph >> "$L" 2>&1
  timeout 150 $D explain $W/$n.eager --replay $W/$n.graph --program $W/$n.dir \
      --hardware h200-sxm-graph --top 30 -o $W/$n.perfetto.json > $OUT/$n.explain.txt 2>&1
  echo "### $n rc $? after $((SECONDS - s)) s" >> "$L"
done
tail -3 "$L"; head -60 $OUT/resnet50_p4k2.explain.txt
