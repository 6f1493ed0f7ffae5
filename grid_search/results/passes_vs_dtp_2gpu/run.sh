#!/bin/bash
# 2 GPUs: the same search written by both transforms (dtp, and the spmd passes'
# composition), each configuration of 2 devices run for real and replayed as a CUDA graph
# (`distir grid-search --run-top 5 --cuda-graph`), side by side in one call: do the passes'
# programs run on NCCL, as fast as dtp's, and as simulated? GPT-2 12 layers x 1024 (16
# heads, vocabulary 50257, sequence 1024), training step (cross entropy, Adam), bfloat16,
# batch 16. Run from the project root, $OUT set.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run.log
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm-graph ;;
  *) HW=h100-sxm-graph ;;
esac
G="python3 -m distir grid-search --model gpt2 --n-layer 12 --d-model 1024 --n-head 16 \
   --seq-len 1024 --vocab-size 50257 --train --loss cross_entropy --optimizer adam \
   --batch-sizes 16 --devices 2 --dtype BFloat16 --hardware $HW --max-microbatches 8 \
   --top 8 --run-top 5 --cuda-graph"
for round in 1 2; do
  for t in dtp passes; do  # (before the switch of 2026-11-27; today: tower passes)
    s=$SECONDS
    timeout -s INT -k 20 130 $G --transform $t -o "$OUT/${t}_$round.csv" >> "$L" 2>&1
    echo "### $t round $round rc $? after $((SECONDS - s)) s" >> "$L"
  done
done
uptime >> "$L"
grep "###\|measured\|D[12] T[12] P[12]" "$L" | tail -60
