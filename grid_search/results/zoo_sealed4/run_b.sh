#!/bin/bash
# Call B, 2 GPUs of either kind, after call A's sealed studies were compared (README.md):
# RegNet's one-GPU step at batch 128 was predicted 20% too slow (7% at 64), SegFormer's T2
# rows 13-14% too fast. `study explain` of RegNet's one-GPU step at 128 and 64 and of
# SegFormer's T2 at 64, eager and replayed, against h200-sxm-graph (h100-sxm-graph on
# H100s); traces and programs come back. From here on both are development models.
# Run from the project root, $OUT set.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_b.log
R=grid_search/results/zoo_sealed4
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
S=/tmp/zoo4; W=/tmp/zoo4/b; mkdir -p $S $W
for m in regnet segformer; do
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
x regnet_1_b128 120 --model $S/regnet.onnx --dim batch=128 --batch-size 128
x regnet_1_b64 100 --model $S/regnet.onnx --dim batch=64 --batch-size 64
x segformer_t2 120 --model $S/segformer.onnx --dim batch=64 --batch-size 64 --tp 2
(cd $W && tar czf $OUT/traces.tgz */prof */prof_replay */program.dir) >> "$L" 2>&1
ls -la $OUT >> "$L"
grep "###\|rror" "$L" | tail; for f in $OUT/*.explain.txt; do head -30 $f; done
