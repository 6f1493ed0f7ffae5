#!/bin/bash
# Call C, one GPU of either kind: `distir explain` of the one-GPU step of the three held-out
# models call A and B's sealed rows found too fast: torchvision's ViT-B/16 structure at
# batch 32, nn.TransformerEncoder 12 x 768 at 8 x 512, EfficientNet-B0 at 64; each run
# eagerly with every op marked and replayed, against the card's device-time profile.
# Run from the project root, $OUT set.
set -u
L=$OUT/run_c.log
R=grid_search/results/zoo_more_2gpu
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
S=/tmp/zoo; W=/tmp/zoo/x; mkdir -p $S $W
for m in tvit encoder efficientnet; do
  [ -s $S/$m.onnx ] || PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 100 python3 $R/export.py $m $S/$m.onnx >> "$L" 2>&1 &
done
wait
D="python3 -m distir"
explain() {  # name onnx import-args...
  local n=$1 m=$2; shift 2
  local s=$SECONDS
  timeout 90 $D import $S/$m.onnx "$@" -o $W/$n.dir >> "$L" 2>&1
  timeout -s INT -k 10 60 $D run $W/$n.dir --profile $W/$n.eager >> "$L" 2>&1
  timeout -s INT -k 10 60 $D run $W/$n.dir --cuda-graph --profile $W/$n.graph >> "$L" 2>&1
  timeout 90 $D explain $W/$n.eager --replay $W/$n.graph --program $W/$n.dir \
      --hardware $HW-graph --top 60 > $OUT/$n.explain.txt 2>&1
  echo "### explain $n rc $? after $((SECONDS - s)) s" >> "$L"
}
explain tvit_d1_b32 tvit --dim batch=32 --train --loss cross_entropy --optimizer adam
explain encoder_d1_b8 encoder --dim batch=8 --dim seq=512 --train --loss mse --optimizer adam
explain efficientnet_d1_b64 efficientnet --dim batch=64 --train --loss cross_entropy --optimizer sgd
grep "###\|rror" "$L" | tail -20
for f in $OUT/*.explain.txt; do head -28 $f; done
