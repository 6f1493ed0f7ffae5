#!/bin/bash
# Call E (1 GPU): what the device-time profile's kernel times leave out (calibration.steady):
# each kernel of a GPT-2-shaped layer (bfloat16) timed warm (as calibrated), with its inputs
# rotated beyond the L2 cache (cold), and after seconds of load (clocks settled).
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_e.log
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv >> "$L" 2>&1
s=$SECONDS
timeout -s INT -k 20 300 python3 -m calibration.steady -o "$OUT/steady.csv" --load 2 >> "$L" 2>&1
echo "### steady rc $? after $((SECONDS - s)) s" >> "$L"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv >> "$L" 2>&1
cat "$L"
