#!/bin/bash
# Diagnosis of the capture that hung in run_smoke.sh: each case in a fresh session with a
# 45 s collective timeout, torch's own warnings on.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_CPP_LOG_LEVEL=WARNING
timeout -s INT -k 20 400 python3 grid_search/results/cuda_graph_4gpu/diag_capture.py "$@" \
    > "$OUT/diag.log" 2>&1
echo "diag rc $?" >> "$OUT/diag.log"
grep -v "^  File\|^    " "$OUT/diag.log" | grep -iv "^\s*$" | tail -60
