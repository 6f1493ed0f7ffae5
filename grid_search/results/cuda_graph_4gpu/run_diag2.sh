#!/bin/bash
# Variants of the P4 pipeline that hung as a CUDA graph (run_diag.sh), each under torchrun
# with a 60 s limit.
set -u
export NCCL_NVLS_ENABLE=0
D=grid_search/results/cuda_graph_4gpu/diag_torchrun.py
one() {  # env-assignments... -- args
  local n=$1; shift
  echo "== $*" >> "$OUT/diag2.log"
  timeout -s KILL 60 env "$@" torchrun --nproc_per_node "$n" "$D" ${ARGS} >> "$OUT/diag2.log" 2>&1
  echo "rc $?" >> "$OUT/diag2.log"
}
ARGS="plain mlp 1,1,4,4" one 4 X=1
ARGS="plain mlp 1,1,2,4" one 2 X=1
ARGS="plain gpt2 1,1,3,3" one 3 X=1
ARGS="barrier gpt2 1,1,4,4" one 4 X=1
ARGS="plain gpt2 1,1,4,4" one 4 NCCL_GRAPH_REGISTER=0
ARGS="plain gpt2 1,1,4,4" one 4 NCCL_LAUNCH_MODE=GROUP
grep -E "^==|^rc|ms \(|nccl|Error|error" "$OUT/diag2.log" | grep -v "^\s*File" | head -60
