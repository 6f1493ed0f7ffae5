#!/bin/bash
# 1 GPU (1 x H200 here). Out of memory under a cap, as ../elementwise_order/ calls E-G
# (its pick_cap.py sets the cap between the predictions of the middle two batch sizes),
# with this folder's model, on models no memory work looked at, named as arguments (a
# call's share): bit (BiT-R50x1), regnet, vit (ViT-B/16), resnet50, swin (Swin-T), all
# cross-entropy on 224 x 224 images; llama (8 x 1024), bert (BERT-base), albert,
# mobilebert, MSE on 512 tokens; wav2vec2 (base, 4 s clips, MSE). Eager, float32, Adam;
# at most 2 batch sizes each. Run from the project root, $OUT set, COMMIT holding the
# commit: bash run_i.sh bit regnet vit ...
set -u
L=$OUT/run_i.log
echo "### project commit $(cat COMMIT); models $*" > "$L"
nvidia-smi -L >> "$L"
S=/tmp/nv; mkdir -p $S $S/csv
s=$SECONDS
export PYTHONPATH=$PWD:${PYTHONPATH:-}
R=grid_search/results
declare -A SRC=([bit]=norms_views [regnet]=zoo_sealed4 [vit]=zoo_2gpu [resnet50]=zoo_host_4gpu
  [swin]=channels_last [llama]=zoo_2gpu [bert]=zoo_host_4gpu [albert]=adam_step
  [mobilebert]=adam_step [wav2vec2]=index_adam)
for m in "$@"; do
  timeout 240 python3 $R/${SRC[$m]}/export.py $m $S/$m.onnx > $S/x_$m.log 2>&1 &
done
wait
tail -qn1 $S/x_*.log >> "$L"
echo "### exports after $((SECONDS - s)) s" >> "$L"
IMG="--train --loss cross_entropy --optimizer adam"
TOK="--dim seq=512 --train --loss mse --optimizer adam"
for m in "$@"; do
  case $m in
    bit|regnet|vit|resnet50|swin) opts=$IMG; batches="32 48 64 80 96 112 128" ;;
    llama|bert|albert|mobilebert) opts=$TOK; batches="4 6 8 10 12 14 16" ;;
    *) opts="--train --loss mse --optimizer adam"; batches="4 6 8 10 12 14 16" ;;
  esac
  cap=$(timeout 120 python3 $R/elementwise_order/pick_cap.py --model $S/$m.onnx $opts \
        --batch-sizes $batches 2>> "$L")
  echo "### $m cap $cap after $((SECONDS - s)) s" >> "$L"
  timeout 200 python3 -m grid_search.study measure --model $S/$m.onnx $opts \
    --batch-sizes $batches --max-devices 1 --max-microbatches 1 --memory-check \
    --memory-limit $cap --margin 0.2 --max-configs 2 --hardware h200-sxm --steps 1 \
    --warmup 1 -o $S/csv/$m.csv >> "$L" 2>&1
  echo "### $m rc $? after $((SECONDS - s)) s" >> "$L"
done
(cd $S/csv && tar cJf $OUT/checks.tar.xz *.csv)
grep "###\|rror\|measured D" "$L" | tail -40
