#!/bin/bash
# 1 GPU (1 x H200 here). (1) the `reduce` family, float32 and bfloat16, device time,
# measurements only, with the new shapes (per-head sums, transposed token tensors);
# (2) reduce_probe.py: column sums as a step's backward hands them over, alone;
# (3) the wav2vec 2.0-Conformer's one-GPU step at 4 clips explained (replayed, float32,
# its own weights), to set its column sums beside call E's D2 step at 4 clips a device.
# Run from the project root, $OUT set, COMMIT holding the commit.
set -u
R=grid_search/results/strided_reduce
export NCCL_NVLS_ENABLE=0
L=$OUT/run_a.log
echo "### project commit $(cat COMMIT)" > "$L"
nvidia-smi -L >> "$L"
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
s=$SECONDS
timeout 100 python3 $R/reduce_probe.py > $OUT/reduce_probe.txt 2>> "$L"
echo "### probe rc $? after $((SECONDS - s)) s" >> "$L"
timeout 300 python3 -m calibration --base $HW --device-time --no-comm --devices 1 \
  --dtypes Float32 BFloat16 --measure-only --families reduce \
  -o $OUT/$HW-graph-reduce.json >> "$L" 2>&1
echo "### reduce rc $? after $((SECONDS - s)) s" >> "$L"
S=/tmp/cf; W=/tmp/cf/e; mkdir -p $S $W
PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 120 python3 grid_search/results/conv1d_tokens/export.py \
  conformer $S/conformer.onnx >> "$L" 2>&1
echo "### export after $((SECONDS - s)) s" >> "$L"
timeout -s INT -k 10 150 python3 -m grid_search.study explain --hardware $HW-graph --cuda-graph \
  --steps 5 --warmup 2 --top 40 --train --optimizer adam --loss mse \
  --model $S/conformer.onnx --dim batch=4 --batch-size 4 \
  -o $W/conformer_1_b4 > /dev/null 2>> "$L"
echo "### conformer_1_b4 rc $? after $((SECONDS - s)) s" >> "$L"
(cd $W && XZ_OPT="-9 -T0" tar cJf $OUT/traces.txz */prof */prof_replay */program.dir */explain.txt) >> "$L" 2>&1
head -70 $W/conformer_1_b4/explain.txt > $OUT/explains.txt
grep "###\|rror" "$L" | tail; cat $OUT/reduce_probe.txt; head -30 $OUT/explains.txt
