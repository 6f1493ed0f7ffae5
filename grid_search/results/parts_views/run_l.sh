#!/bin/bash
# 1 GPU (1 x H200 here). Out of memory under a tight cap: as run_i.sh, but with batch sizes
# about 3% apart, so that the cap (pick_cap.py: between the predicted peaks of the middle
# two) sits about 1.5% from the predictions on each side of it. The models whose peaks
# call H and calls I-J found under the measured (convolutions' cuDNN workspace):
# ResNet-50, PoolFormer-S12, BiT-R50x1, RegNet. Eager, float32, Adam, cross-entropy, 224 x
# 224 images; four batch sizes each. Run from the project root, $OUT set, COMMIT holding
# the commit.
set -u
L=$OUT/run_l.log
echo "### project commit $(cat COMMIT)" > "$L"
nvidia-smi -L >> "$L"
S=/tmp/nv; mkdir -p $S $S/csv
s=$SECONDS
export PYTHONPATH=$PWD:${PYTHONPATH:-}
R=grid_search/results
declare -A SRC=([resnet50]=zoo_host_4gpu [poolformer]=channels_last [bit]=norms_views
  [regnet]=zoo_sealed4)
for m in resnet50 poolformer bit regnet; do
  timeout 240 python3 $R/${SRC[$m]}/export.py $m $S/$m.onnx > $S/x_$m.log 2>&1 &
done
wait
tail -qn1 $S/x_*.log >> "$L"
echo "### exports after $((SECONDS - s)) s" >> "$L"
IMG="--train --loss cross_entropy --optimizer adam"
for m in resnet50 poolformer bit regnet; do
  batches="60 62 64 66"
  cap=$(timeout 120 python3 $R/elementwise_order/pick_cap.py --model $S/$m.onnx $IMG \
        --batch-sizes $batches 2>> "$L")
  echo "### $m cap $cap after $((SECONDS - s)) s" >> "$L"
  timeout 200 python3 -m grid_search.study measure --model $S/$m.onnx $IMG \
    --batch-sizes $batches --max-devices 1 --max-microbatches 1 --memory-check \
    --memory-limit $cap --margin 0.2 --max-configs 4 --hardware h200-sxm --steps 1 \
    --warmup 1 -o $S/csv/$m.csv >> "$L" 2>&1
  echo "### $m rc $? after $((SECONDS - s)) s" >> "$L"
done
(cd $S/csv && tar cJf $OUT/checks.tar.xz *.csv)
grep "###\|rror\|measured D" "$L" | tail -40
