#!/bin/bash
# The GPT-2 350M training study (float16, every D/T/P/K with D*T*P <= 4, K <= 8, batch 8 and
# 32), each step replayed as a CUDA graph; a hung run is declared after 40 s.
set -u
export NCCL_NVLS_ENABLE=0  # NCCL_GRAPH_REGISTER=0 is set by the backend (procs.graph_env)
nvidia-smi -L > "$OUT/host.txt"; (nproc; uptime) >> "$OUT/host.txt" 2>&1
timeout -s INT -k 15 330 python3 -m grid_search.study measure --model gpt2-350m-train \
    --dtype Float16 --batch-sizes 8 32 --max-devices 4 --max-microbatches 8 --cuda-graph \
    --timeout 40 -o "$OUT/gpt2_350m_train_graph_measured.csv" > "$OUT/study.log" 2>&1
echo "study rc $?" >> "$OUT/study.log"
uptime >> "$OUT/host.txt"
grep -v "^\s*File\|^    " "$OUT/study.log" | tail -80
