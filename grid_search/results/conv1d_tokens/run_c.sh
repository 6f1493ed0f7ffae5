#!/bin/bash
# 1 GPU (1 x H200 here). The 1-D convolution families (contiguous inputs) on kernel-1
# projections alone, two more samples (--pointwise-conv1d --seed 1 and --seed 2: 240
# shapes x 3 each), float32, device time, measurements only; everything under $OUT/cal
# packed in one archive (call B's second CSV was left behind: too many files came back).
# Run from the project root, $OUT set, COMMIT holding the commit.
set -u
L=$OUT/run_c.log
echo "### project commit $(cat COMMIT)" > "$L"
nvidia-smi -L >> "$L"
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
C=/tmp/cal; mkdir -p $C
s=$SECONDS
for seed in 1 2; do
  timeout 200 python3 -m calibration --base $HW --device-time --no-comm --devices 1 \
    --dtypes Float32 --measure-only --pointwise-conv1d --seed $seed \
    -o $C/$HW-graph-conv1d-s$seed.json --families conv1d conv1d_dgrad conv1d_wgrad \
    > $C/conv1d-s$seed.log 2>&1
  echo "### seed $seed rc $? after $((SECONDS - s)) s" >> "$L"
done
(cd $C && tar czf $OUT/cal.tgz .)
grep "###" "$L"; tail -n 2 $C/*.log
