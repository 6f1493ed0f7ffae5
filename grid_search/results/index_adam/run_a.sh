#!/bin/bash
# 2 GPUs (2 x H200 here). GPU 0: the `gather_elements` and `scatter_elements` families
# (float32) and `adam` timed in a sequence of distinct operands (float32, bfloat16),
# device time, measurements only (fitted off the device). GPU 1 meanwhile: the wrap of a
# broadcast index before and after (wrap_lowering.py), then the one-GPU training steps of
# HF DeBERTa-v2 (v3-base sizes, 8 x 512, MSE, Adam; the backend's new wrap) and BiT-R50x1
# (64 images, cross entropy, Adam) explained (replayed, float32). CPU meanwhile: the two
# sealed models of run_b.sh exported (kept in /tmp for the next call on the same machine).
# Run from the project root, $OUT set, COMMIT holding the commit.
set -u
R=grid_search/results/index_adam
N=grid_search/results/norms_views
export NCCL_NVLS_ENABLE=0
L=$OUT/run_a.log
echo "### project commit $(cat COMMIT)" > "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
S=/tmp/nv; W=/tmp/nv/e; M=/tmp/sealed_models; mkdir -p $S $W $M $OUT/cal
s=$SECONDS
(for m in sewd efficientnet; do
   PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 200 python3 $R/export.py $m $M/$m.onnx >> "$L" 2>&1
   echo "### export $m rc $? after $((SECONDS - s)) s" >> "$L"
 done) &
CUDA_VISIBLE_DEVICES=0 timeout 330 python3 -m calibration -o $OUT/cal/$HW-graph-index.json \
  --base $HW --device-time --no-comm --devices 1 --dtypes Float32 \
  --families gather_elements scatter_elements --measure-only >> "$L" 2>&1 &
CAL=$!
(
  PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 120 python3 $N/export.py deberta_dynamo $S/deberta.onnx >> "$L" 2>&1
  PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 120 python3 $N/export.py bit $S/bit.onnx >> "$L" 2>&1
  echo "### exports for the explains after $((SECONDS - s)) s" >> "$L"
) &
EXP=$!
CUDA_VISIBLE_DEVICES=1 timeout 60 python3 $R/wrap_lowering.py --batch 8 > $OUT/wrap_lowering.txt 2>> "$L"
echo "### wrap_lowering rc $? after $((SECONDS - s)) s" >> "$L"
wait $EXP
E="python3 -m grid_search.study explain --hardware $HW-graph --cuda-graph --steps 10 --warmup 3 --top 40 --train --optimizer adam"
CUDA_VISIBLE_DEVICES=1 timeout -s INT -k 10 150 $E --loss mse --model $S/deberta.onnx \
  --dim batch=8 --dim seq=512 --batch-size 8 -o $W/deberta_1_b8 > /dev/null 2>> "$L"
echo "### deberta_1_b8 rc $? after $((SECONDS - s)) s" >> "$L"
CUDA_VISIBLE_DEVICES=1 timeout -s INT -k 10 130 $E --loss cross_entropy --model $S/bit.onnx \
  --dim batch=64 --batch-size 64 -o $W/bit_1_b64 > /dev/null 2>> "$L"
echo "### bit_1_b64 rc $? after $((SECONDS - s)) s" >> "$L"
wait $CAL
echo "### index families done after $((SECONDS - s)) s" >> "$L"
CUDA_VISIBLE_DEVICES=0 timeout 150 python3 -m calibration -o $OUT/cal/$HW-graph-adam.json \
  --base $HW --device-time --no-comm --devices 1 --dtypes Float32 BFloat16 \
  --families adam --measure-only >> "$L" 2>&1
echo "### adam family rc $? after $((SECONDS - s)) s" >> "$L"
wait
(cd $W && XZ_OPT="-9 -T0" tar cJf $OUT/traces.txz */prof */prof_replay */program.dir */explain.txt) \
    >> "$L" 2>&1
for f in $W/*/explain.txt; do echo "## $f"; head -60 "$f"; done > $OUT/explains.txt
ls -la $M >> "$L"
grep "###\|rror" "$L" | tail -14; cat $OUT/wrap_lowering.txt; grep -h "step:\|^## " $OUT/explains.txt
