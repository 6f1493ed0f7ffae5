#!/bin/bash
# Call I (4 GPUs): where an eager pipeline of the HF GPT-2 training step loses its time. The
# step (batch 16 x 512, cross entropy, Adam) under D2 x P2 with 4 microbatches (26% slower
# than predicted eagerly, within 1.6% replayed) and 2 microbatches (as predicted), each run
# eagerly and profiled (`distir run --profile`: one more step, every op marked), and aligned
# with the simulation there (`distir explain`: the program's weights are on that machine).
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_i.log
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"
S=/tmp/s; mkdir -p $S
timeout 120 python3 grid_search/results/graph_zoo_4gpu/export_hf_gpt2.py $S/gpt2_hf.onnx >> "$L" 2>&1
D="python3 -m distir"
timeout 120 $D import $S/gpt2_hf.onnx --dim batch=16 --dim seq=512 --train --loss cross_entropy \
    --optimizer adam -o $S/step.dir >> "$L" 2>&1
echo "### import rc $?" >> "$L"
for k in 4 2; do
  timeout 60 $D transform $S/step.dir --dp 2 --pp 2 -k $k --hardware h200-sxm -o $S/d2p2k$k.dir >> "$L" 2>&1
  timeout -s INT 120 $D run $S/d2p2k$k.dir --profile $S/prof_k$k >> "$L" 2>&1
  echo "### run k$k rc $?" >> "$L"
  timeout 120 $D explain --program $S/d2p2k$k.dir --hardware h200-sxm --top 25 $S/prof_k$k \
      -o $S/explain_k$k.json > $OUT/explain_k$k.txt 2>&1
  echo "### explain k$k rc $?" >> "$L"
  (cd $S && tar czf $OUT/prof_d2p2k$k.tgz prof_k$k explain_k$k.json)
done
ls -la $OUT >> "$L"
tail -30 "$L"
