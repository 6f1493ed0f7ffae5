#!/bin/bash
# 4 GPUs (asked for as H100s), a later lease: the held-out study of ../passes_4gpu/run.sh
# twice on one machine (launch_1/, launch_2/), every row now recording the SM clocks and
# clock-event reasons sampled during its measurement, with the cards' power, clocks and
# temperatures beside each launch (power.txt): whether the 4-GPU rows at batch 32 repeat,
# and if not, whether the cards were held back while they ran.
# Run from the project root, $OUT set.
set -u
export NCCL_NVLS_ENABLE=0
Q="index,name,power.draw,power.limit,clocks.sm,clocks.max.sm,temperature.gpu,clocks_event_reasons.active"
snap() { echo "## $1 after $SECONDS s" >> "$OUT/power.txt"; nvidia-smi --query-gpu=$Q --format=csv >> "$OUT/power.txt" 2>&1; }
nvidia-smi -L > "$OUT/power.txt"
snap start
mkdir -p "$OUT/launch_1" "$OUT/launch_2"
(while sleep 5; do nvidia-smi --query-gpu=timestamp,index,power.draw,clocks.sm,temperature.gpu,clocks_event_reasons.active --format=csv,noheader; done) > "$OUT/power_trace.csv" 2>&1 &
P=$!
OUT=$OUT/launch_1 bash grid_search/results/passes_4gpu/run.sh > /dev/null 2>&1
snap "launch 1"
if [ $SECONDS -lt 330 ]; then
  OUT=$OUT/launch_2 bash grid_search/results/passes_4gpu/run.sh > /dev/null 2>&1
  snap "launch 2"
else
  echo "## launch 2 not run: $SECONDS s spent" >> "$OUT/power.txt"
fi
kill $P
grep -h "###\|measured D" "$OUT"/launch_*/run.log | tail -80
cat "$OUT/power.txt"
