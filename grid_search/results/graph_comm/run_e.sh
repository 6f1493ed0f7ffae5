#!/bin/bash
# 4 GPUs (4 x H200 here): every collective over 2 and 4 ranks, eager and replayed as CUDA
# graphs, side by side (as call A on 2 GPUs); measurements only (CSV; fitted off the device).
# Run from the project root, $OUT set, COMMIT holding the commit.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_e.log
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
mkdir -p $OUT/cal
s=$SECONDS
for mode in graph eager; do
  extra=""; [ $mode = graph ] && extra="--device-time"
  timeout 250 python3 -m calibration -o $OUT/cal/$HW-comm4-$mode.json --base $HW --devices 4 \
    --families collectives $extra --measure-only >> "$L" 2>&1
  echo "### collectives $mode rc $? after $((SECONDS - s)) s" >> "$L"
done
uptime >> "$L"
grep "###\|rror" "$L" | tail -20
