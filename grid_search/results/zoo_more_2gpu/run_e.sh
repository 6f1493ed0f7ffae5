#!/bin/bash
# Call E, 2 GPUs of either kind: `study explain` (now taking a model file with the search's
# options, the program's fingerprint printed beside the result) of the two rows the
# weight-gradient layouts' refit below 2,048 rows left predicted far too fast: the
# nn.TransformerEncoder's P2 x K8 (batch 8, one 512-token sequence per microbatch, call D's
# row a9c2920fd9c3cec9: -26%) and torchvision ViT-B/16's P2 x K8 (batch 32: -5.5%), with the
# encoder's P2 x K4 beside them (-4%); eager and replayed, against h200-sxm-graph (or
# h100-sxm-graph on H100s); the encoder's traces come back for explains here.
# Run from the project root, $OUT set.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_e.log
R=grid_search/results/zoo_more_2gpu
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
S=/tmp/zoo; W=/tmp/zoo/e; mkdir -p $S $W
for m in tvit encoder; do
  PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 60 python3 $R/export.py $m $S/$m.onnx >> "$L" 2>&1 &
done
wait
E="python3 -m grid_search.study explain --hardware $HW-graph --cuda-graph --steps 10 --warmup 3 --top 40 --train --optimizer adam"
x() {  # name timeout args...
  n=$1; t=$2; shift 2; s=$SECONDS
  timeout -s INT -k 10 $t $E "$@" -o $W/$n > /dev/null 2>> "$L"
  echo "### $n rc $? after $((SECONDS - s)) s" >> "$L"
  cp $W/$n/explain.txt $OUT/$n.explain.txt 2>> "$L"
}
x encoder_p2k8 150 --model $S/encoder.onnx --dim batch=8 --dim seq=512 --loss mse \
    --batch-size 8 --pp 2 --microbatches 8 --schedule 1f1b
x encoder_p2k4 120 --model $S/encoder.onnx --dim batch=8 --dim seq=512 --loss mse \
    --batch-size 8 --pp 2 --microbatches 4 --schedule 1f1b
x tvit_p2k8 150 --model $S/tvit.onnx --dim batch=32 --loss cross_entropy \
    --batch-size 32 --pp 2 --microbatches 8 --schedule 1f1b
(cd $W && tar czf $OUT/encoder_traces.tgz encoder_p2k8/prof encoder_p2k8/prof_replay \
    encoder_p2k8/program.dir encoder_p2k4/prof encoder_p2k4/prof_replay encoder_p2k4/program.dir) >> "$L" 2>&1
ls -la $OUT >> "$L"
grep "###\|rror" "$L" | tail; for f in $OUT/*.explain.txt; do head -24 $f; done
