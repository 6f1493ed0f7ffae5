#!/bin/bash
# 4 GPUs, one call: does binding each rank to its own cores (DISTIR_PIN_CORES=1) make the
# ranks' hosts run alike, and the host-bound batch-8 steps faster and steadier? Host
# dispatch per rank and six batch-8 configurations of the GPT-2 350M training step, without
# pinning, with it, and without it again.
set -u
export NCCL_NVLS_ENABLE=0
(nproc; python3 -c "import os; print(len(os.sched_getaffinity(0)))"; lscpu | grep -i "numa\|model name") > "$OUT/pin.log" 2>&1
C="4,1,1,1 2,2,1,1 1,4,1,1 2,1,2,4 1,2,2,8 1,1,4,4"
for pin in 0 1; do
  DISTIR_PIN_CORES=$pin timeout -s INT -k 20 110 torchrun --nproc_per_node 4 \
      -m calibration.bench_dispatch measure -o "$OUT/dispatch_pin$pin.csv" >> "$OUT/pin.log" 2>&1
  echo "dispatch pin=$pin rc $?" >> "$OUT/pin.log"
done
for run in pin0_a pin1 pin0_b; do
  pin=${run:3:1}
  DISTIR_PIN_CORES=$pin timeout -s INT -k 20 200 python3 -m grid_search.study measure \
      --model gpt2-350m-train --dtype Float16 --batch-sizes 8 --max-devices 4 \
      --max-microbatches 8 --configs $C -o "$OUT/$run.csv" >> "$OUT/pin.log" 2>&1
  echo "study $run rc $?" >> "$OUT/pin.log"
done
gzip "$OUT"/dispatch_pin*.csv
(nvidia-smi -L; uptime) >> "$OUT/pin.log" 2>&1
grep -E "measured|rc|^[0-9]" "$OUT/pin.log"
