#!/bin/bash
# The committed studies compared with the H200 profiles of this commit, into OUT (default
# the folder after/ beside this script). Run from the project root, on any machine:
#   bash grid_search/results/overlap_comm_2gpu/studies/compare.sh OUT
# before/ was written at commit 617fdcc (the profiles without overlap_comm_slowdown),
# after/ at 4e9056b (with it).
set -u
O=${1:-grid_search/results/overlap_comm_2gpu/studies/after}
G=calibration/profiles/h200-sxm-graph.json
E=calibration/profiles/h200-sxm.json
H=grid_search/results/heldout_bf16_r2/h200-sxm-host.json   # "base": "h200-sxm"
T=grid_search/results/transpose_copy_2gpu
PY=${PYTHON:-python}
mkdir -p "$O"
run() { n=$1; shift; $PY -m grid_search.study compare "$@" -o "$O/$n" > "$O/$n.log" 2>&1 || echo "FAIL $n"; }
# replayed steps, h200-sxm-graph (stages weighed with h200-sxm, as measured)
for m in c_gpt2_12x2560_train c_gpt2_12x2560 b_gpt2_12x2560_train b_gpt2_12x2560 \
         b_gpt2_20x1280_train b_gpt2_20x1280 b_gpt2_16x1536_train b_gpt2_16x1536; do
  run $m $T/${m}_bf16_graph_measured.csv --hardware $G --stages-hardware h200-sxm --dtype BFloat16
done
run g4_16x1536_train grid_search/results/graph_heldout_4gpu/call_b/gpt2_16x1536_train_bf16_graph_measured.csv \
    --hardware $G --stages-hardware h200-sxm --dtype BFloat16 --skip-stale
run cg_350m_train grid_search/results/cuda_graph_4gpu/gpt2_350m_train_graph_measured.csv \
    --dtype Float16 --hardware $G --stages-hardware h100-sxm
# eager steps (8 of the 17 batch-8 rows were measured on programs the transform no longer builds)
run eager_16x1536_train grid_search/results/heldout_bf16_r2/gpt2_16x1536_train_bf16_measured.csv \
    --hardware $E --dtype BFloat16 --skip-stale
run host_16x1536_train grid_search/results/heldout_bf16_r2/gpt2_16x1536_train_bf16_measured.csv \
    --hardware $H --dtype BFloat16 --skip-stale
rm -f "$O"/*.log
