#!/bin/bash
# 2 GPUs (2 x H200 here). (1) More kernel-1 projections for the 1-D convolution families
# (--pointwise-conv1d --seed 1: 240 shapes x 3), float32, device time, measurements only:
# `conv1d*` on GPU 0 and `conv1d_nwc*` on GPU 1 at once. (2) **Sealed** (written to
# $OUT/sealed.tgz only, printed nowhere): HF wav2vec 2.0-Conformer (export.py conformer)
# at 8 and 16 clips of 64,000 samples (MSE against the hidden states, Adam), float32,
# every configuration of <= 2 GPUs replayed, on its own weights. (3) After call A was
# opened: ConvBERT's one-GPU step at 16 x 512 explained (replayed, float32, its weights).
# Run from the project root, $OUT set, COMMIT holding the commit.
R=grid_search/results/conv1d_tokens
source grid_search/results/sealed_lib.sh
sealed_begin run_b 2 20
mkdir -p $OUT/cal
s=$SECONDS
CAL="python3 -m calibration --base $HW --device-time --no-comm --devices 1 --dtypes Float32 --measure-only --pointwise-conv1d --seed 1"
CUDA_VISIBLE_DEVICES=0 timeout 200 $CAL -o $OUT/cal/$HW-graph-conv1d-s1.json \
  --families conv1d conv1d_dgrad conv1d_wgrad > $OUT/cal/conv1d-s1.log 2>&1 &
CUDA_VISIBLE_DEVICES=1 timeout 200 $CAL -o $OUT/cal/$HW-graph-conv1d-nwc-s1.json \
  --families conv1d_nwc conv1d_nwc_dgrad conv1d_nwc_wgrad > $OUT/cal/conv1d-nwc-s1.log 2>&1 &
wait
echo "### conv1d families after $((SECONDS - s)) s" >> "$L"
for f in $OUT/cal/*.log; do tail -n 2 $f >> "$L"; done
sealed_export conformer $R/export.py
sealed_search conformer_b8_graph 100 --model $S/conformer.onnx --dim batch=8 --train --loss mse --optimizer adam
sealed_search conformer_b16_graph 110 --model $S/conformer.onnx --dim batch=16 --train --loss mse --optimizer adam
sealed_end
W=/tmp/cb/e; mkdir -p $W
s=$SECONDS
PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 100 python3 grid_search/results/adam_step/export.py convbert $S/convbert.onnx >> "$L" 2>&1
echo "### export convbert after $((SECONDS - s)) s" >> "$L"
CUDA_VISIBLE_DEVICES=0 timeout -s INT -k 10 120 python3 -m grid_search.study explain --hardware $HW-graph --cuda-graph \
  --steps 5 --warmup 2 --top 30 --train --optimizer adam --loss mse \
  --model $S/convbert.onnx --dim batch=16 --dim seq=512 --batch-size 16 \
  -o $W/convbert_1_b16 > /dev/null 2>> "$L"
echo "### convbert_1_b16 rc $? after $((SECONDS - s)) s" >> "$L"
(cd $W && XZ_OPT="-9 -T0" tar cJf $OUT/traces.txz */prof_replay */program.dir */explain.txt) >> "$L" 2>&1
head -60 $W/convbert_1_b16/explain.txt > $OUT/explains.txt
grep "###\|rror" "$L" | tail -20; head -40 $OUT/explains.txt
