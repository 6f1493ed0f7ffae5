#!/bin/bash
# For a later session (not run yet), 2 GPUs of either kind: what call B left unexplained.
# SegFormer's one-GPU step at 64 (its rows are 7-11% too slow on today's profile: the
# depthwise gradients of its Mix-FFN, whose input is a channels-last view, are thought to
# run about 5x faster than the NCHW microbenchmarks), MobileNetV3's P2 x K8 at 128 (15.8%
# too slow, 16 images a microbatch), explained eagerly and replayed; then depthwise 3 x 3
# convolutions and their gradients timed with NCHW and channels-last inputs
# (`dw_layouts.py`), to see whether the memory format needs a family of its own.
# Run from the project root, $OUT set.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_c.log
R=grid_search/results/zoo_sealed4
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
S=/tmp/zoo4; W=/tmp/zoo4/c; mkdir -p $S $W
for m in segformer mobilenetv3; do
  PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 90 python3 $R/export.py $m $S/$m.onnx >> "$L" 2>&1 &
done
CUDA_VISIBLE_DEVICES=1 timeout 120 python3 $R/dw_layouts.py > $OUT/dw_layouts.txt 2>> "$L" &
wait
E="python3 -m grid_search.study explain --hardware $HW-graph --cuda-graph --steps 10 --warmup 3 --top 40 --train --optimizer adam --loss cross_entropy"
x() {  # name timeout args...
  n=$1; t=$2; shift 2; s=$SECONDS
  timeout -s INT -k 10 $t $E "$@" -o $W/$n > /dev/null 2>> "$L"
  echo "### $n rc $? after $((SECONDS - s)) s" >> "$L"
  cp $W/$n/explain.txt $OUT/$n.explain.txt 2>> "$L"
}
x segformer_1 100 --model $S/segformer.onnx --dim batch=64 --batch-size 64
x mobilenetv3_p2k8 120 --model $S/mobilenetv3.onnx --dim batch=128 --batch-size 128 --pp 2 \
    --microbatches 8 --schedule 1f1b
(cd $W && tar czf $OUT/traces.tgz */prof */prof_replay */program.dir */program.npz) >> "$L" 2>&1
grep "###\|rror" "$L" | tail; cat $OUT/dw_layouts.txt; for f in $OUT/*.explain.txt; do head -30 $f; done
