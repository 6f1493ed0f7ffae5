#!/bin/bash
# 1 GPU (1 x H200 here). Out of memory under a cap as in call E (run_e.sh), with the
# session's final code, on more models it did not look at: CvT-13 and ConvNeXt-T
# (cross-entropy), WavLM base (4 s clips) and GPT-NeoX at OPT-125M's sizes (512 tokens,
# MSE), and OPT-125M again (call E's one wrong verdict, before same-type casts became
# views). Eager, float32, Adam. Run from the project root, $OUT set, COMMIT holding the
# commit.
set -u
L=$OUT/run_f.log
echo "### project commit $(cat COMMIT)" > "$L"
nvidia-smi -L >> "$L"
S=/tmp/nv; mkdir -p $S
s=$SECONDS
export PYTHONPATH=$PWD:${PYTHONPATH:-}
R=grid_search/results
(timeout 200 python3 $R/channels_last/export.py cvt $S/cvt.onnx > $S/x1.log 2>&1 &
 timeout 200 python3 $R/zoo_sealed3/export.py convnext $S/convnext.onnx > $S/x2.log 2>&1 &
 timeout 200 python3 $R/index_adam/export.py wavlm $S/wavlm.onnx > $S/x3.log 2>&1 &
 timeout 200 python3 $R/zoo_sealed3/export.py neox $S/neox.onnx > $S/x4.log 2>&1 &
 timeout 200 python3 $R/zoo_sealed3/export.py opt $S/opt.onnx > $S/x5.log 2>&1 & wait)
cat $S/x*.log >> "$L"
echo "### exports after $((SECONDS - s)) s" >> "$L"
check() {  # name model "batch sizes" options...
  local name=$1 model=$2 batches=$3; shift 3
  cap=$(timeout 120 python3 $R/elementwise_order/pick_cap.py --model $S/$model.onnx "$@" \
        --batch-sizes $batches 2>> "$L")
  echo "### $name cap $cap after $((SECONDS - s)) s" >> "$L"
  timeout 200 python3 -m grid_search.study measure --model $S/$model.onnx "$@" \
    --batch-sizes $batches --max-devices 1 --max-microbatches 1 --memory-check \
    --memory-limit $cap --margin 0.2 --max-configs 4 --hardware h200-sxm --steps 1 \
    --warmup 1 -o $OUT/$name.csv >> "$L" 2>&1
  echo "### $name rc $? after $((SECONDS - s)) s" >> "$L"
}
IMG="--train --loss cross_entropy --optimizer adam"
TOK="--dim seq=512 --train --loss mse --optimizer adam"
check cvt cvt "32 48 64 80 96 112 128" $IMG
check convnext convnext "32 48 64 80 96 112 128" $IMG
check wavlm wavlm "4 6 8 10 12 14 16" --train --loss mse --optimizer adam
check neox neox "4 6 8 10 12 14 16" $TOK
check opt opt "4 6 8 10 12 14 16" $TOK
grep "###\|rror\|measured D" "$L" | tail -40
