#!/bin/bash
# 1 GPU (1 x H200 here): the `adam` family again (float32, bfloat16), each update timed in a
# sequence of distinct operands replayed as a CUDA graph (run_a.sh's sequence, timed on a
# held stream, measured the host: ~57 us per update at every size up to 2 M elements),
# device time, measurements only (fitted off the device).
# Run from the project root, $OUT set, COMMIT holding the commit.
set -u
L=$OUT/run_c.log
echo "### project commit $(cat COMMIT)" > "$L"
nvidia-smi -L >> "$L"
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
mkdir -p $OUT/cal
s=$SECONDS
timeout 300 python3 -m calibration -o $OUT/cal/$HW-graph-adam.json \
  --base $HW --device-time --no-comm --devices 1 --dtypes Float32 BFloat16 \
  --families adam --measure-only >> "$L" 2>&1
echo "### adam family rc $? after $((SECONDS - s)) s" >> "$L"
grep "###\|rror" "$L" | tail -6
grep Float32 $OUT/cal/*.csv | awk -F, '{printf "%s %.1f us\n", $4, $10*1e6}'
