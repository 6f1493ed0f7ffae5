#!/bin/bash
# 1 GPU (1 x H200 here): the `conv1d`, `conv1d_dgrad` and `conv1d_wgrad` families (1-D
# convolutions of speech models, calibration.bench_train.conv1d_shapes), float32, device
# time, measurements only (fitted off the device).
# Run from the project root, $OUT set, COMMIT holding the commit.
set -u
L=$OUT/run_g.log
echo "### project commit $(cat COMMIT)" > "$L"
nvidia-smi -L >> "$L"
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
mkdir -p $OUT/cal
s=$SECONDS
timeout 480 python3 -m calibration -o $OUT/cal/$HW-graph-conv1d.json \
  --base $HW --device-time --no-comm --devices 1 --dtypes Float32 \
  --families conv1d conv1d_dgrad conv1d_wgrad --measure-only >> "$L" 2>&1
echo "### conv1d families rc $? after $((SECONDS - s)) s" >> "$L"
grep "###\|rror\|1-D" "$L" | tail -6
