#!/bin/bash
# Call A (2 GPUs): configurations of the held-out bfloat16 transformer (../graph_heldout_4gpu/),
# each run eagerly with every op marked and again replayed as a CUDA graph, explained with
# the replay's kernels (`study explain --cuda-graph`, i.e. `distir explain --replay`) against
# the device-time profile `h200-sxm-graph` (stages weighed with h200-sxm, as measured).
# Run from the project root, $OUT set. Only the explanations come back (traces stay).
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_a.log
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
W=/tmp/explain
mkdir -p $W
one() {  # name model batch dp tp pp k
  local s=$SECONDS
  timeout -s INT -k 20 150 python3 -m grid_search.study explain --model "$2" --dtype BFloat16 \
      --batch-size "$3" --dp "$4" --tp "$5" --pp "$6" --microbatches "$7" --cuda-graph \
      --hardware calibration/profiles/h200-sxm-graph.json --stages-hardware h200-sxm \
      --steps 10 --warmup 3 -o "$W/$1" > "$W/$1.out" 2>&1
  echo "### $1 rc $? after $((SECONDS - s)) s" >> "$L"
}
T=gpt2-16-1536-12-train
one train_b8_d1 $T 8 1 1 1 1
one train_b8_d2 $T 8 2 1 1 1
one train_b8_t2 $T 8 1 2 1 1
one train_b32_d1 $T 32 1 1 1 1
one infer_b8_d1 gpt2-16-1536-12 8 1 1 1 1
one train_b8_p2k4 $T 8 1 1 2 4
(cd $W && tar czf $OUT/explain.tgz */explain.txt */explain.json *.out)
uptime >> "$L"
for f in $W/*/explain.txt; do echo "== $f"; head -30 "$f"; done
tail -5 "$L"
