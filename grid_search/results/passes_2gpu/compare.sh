#!/bin/bash
# Run from the project root: the two measured files against h200-sxm-graph (the card's
# device-time profile; every row replayed as a CUDA graph, stages cut as measured).
set -eu
D=grid_search/results/passes_2gpu
for f in gpt2_12x2560_train_bf16_graph gpt2_12x2560_bf16_graph; do
  python -m grid_search.study compare $D/${f}_measured.csv --dtype BFloat16 \
      --hardware h200-sxm-graph -o $D/${f}_h200-sxm-graph
done
