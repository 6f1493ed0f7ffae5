#!/bin/bash
# 2 GPUs (2 x H200 here). After call B was opened: its worst rows explained (replayed,
# float32, measured with a training step's optimizer state): HF MobileBERT at 16 x 512 on
# one GPU and D2 (D2 -15%), HF DINOv2 at 32 images P2 x K8 1f1b (-9%).
# Run from the project root, $OUT set, COMMIT holding the commit.
set -u
R=grid_search/results/adam_step
export NCCL_NVLS_ENABLE=0
L=$OUT/run_c.log
echo "### project commit $(cat COMMIT)" > "$L"
nvidia-smi -L >> "$L"
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
S=/tmp/nv; W=/tmp/nv/e; mkdir -p $S $W
s=$SECONDS
for m in mobilebert dinov2; do
  PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 150 python3 $R/export.py $m $S/$m.onnx >> "$L" 2>&1 &
done; wait
echo "### exports after $((SECONDS - s)) s" >> "$L"
E="python3 -m grid_search.study explain --hardware $HW-graph --cuda-graph --steps 10 --warmup 3 --top 40 --train --optimizer adam"
TXT="--loss mse --model $S/mobilebert.onnx --dim batch=16 --dim seq=512 --batch-size 16"
timeout -s INT -k 10 120 $E $TXT --dp 2 -o $W/mobilebert_d2_b16 > /dev/null 2>> "$L"
echo "### mobilebert_d2_b16 rc $? after $((SECONDS - s)) s" >> "$L"
CUDA_VISIBLE_DEVICES=0 timeout -s INT -k 10 100 $E $TXT -o $W/mobilebert_1_b16 > /dev/null 2>> "$L"
echo "### mobilebert_1_b16 rc $? after $((SECONDS - s)) s" >> "$L"
timeout -s INT -k 10 120 $E --loss cross_entropy --model $S/dinov2.onnx --dim batch=32 \
  --batch-size 32 --pp 2 --microbatches 8 --schedule 1f1b -o $W/dinov2_p2k8_b32 > /dev/null 2>> "$L"
echo "### dinov2_p2k8_b32 rc $? after $((SECONDS - s)) s" >> "$L"
(cd $W && XZ_OPT="-9 -T0" tar cJf $OUT/traces.txz */prof */prof_replay */program.dir */explain.txt) \
    >> "$L" 2>&1
for f in $W/*/explain.txt; do echo "## $f"; head -70 "$f"; done > $OUT/explains.txt
grep "###\|rror" "$L" | tail -14; grep -h "step:\|^## " $OUT/explains.txt
