#!/bin/bash
# Call B, 2 GPUs of either kind, after call A's sealed studies were compared (README.md):
# both convolutional models were predicted too fast on every row (MobileNetV2 by a median
# of 9.7%, ConvNeXt-T by 4.7-7.6%). `study explain` of their one-GPU steps at batch 64 and
# of each one's worst row (ConvNeXt's T2: -11%; MobileNet's P2 x K2: -14%), eager and
# replayed, against h200-sxm-graph (h100-sxm-graph on H100s); the traces and programs come
# back for explains here. From here on both models are development models.
# Run from the project root, $OUT set.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_b.log
R=grid_search/results/zoo_sealed3
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
S=/tmp/zoo3; W=/tmp/zoo3/b; mkdir -p $S $W
for m in convnext mobilenet; do
  PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 90 python3 $R/export.py $m $S/$m.onnx >> "$L" 2>&1 &
done
wait
E="python3 -m grid_search.study explain --hardware $HW-graph --cuda-graph --steps 10 --warmup 3 --top 40 --train --optimizer adam --loss cross_entropy"
x() {  # name timeout args...
  n=$1; t=$2; shift 2; s=$SECONDS
  timeout -s INT -k 10 $t $E "$@" -o $W/$n > /dev/null 2>> "$L"
  echo "### $n rc $? after $((SECONDS - s)) s" >> "$L"
  cp $W/$n/explain.txt $OUT/$n.explain.txt 2>> "$L"
}
x convnext_1 120 --model $S/convnext.onnx --dim batch=64 --batch-size 64
x mobilenet_1 120 --model $S/mobilenet.onnx --dim batch=64 --batch-size 64
x convnext_t2 150 --model $S/convnext.onnx --dim batch=64 --batch-size 64 --tp 2
x mobilenet_p2k2 150 --model $S/mobilenet.onnx --dim batch=64 --batch-size 64 --pp 2 \
    --microbatches 2 --schedule 1f1b
(cd $W && tar czf $OUT/traces.tgz */prof */prof_replay */program.dir) >> "$L" 2>&1
ls -la $OUT >> "$L"
grep "###\|rror" "$L" | tail; for f in $OUT/*.explain.txt; do head -30 $f; done
