#!/bin/bash
# 2 GPUs (2 x H200 here), the first two-GPU machine lent in eight sessions. Held out: five
# token models that no cost-model work has looked at (../heldout_1gpu/export.py: StableLM,
# GPT-NeoX, Qwen2, OLMo and GPT-J blocks, exported on this machine), their float32
# training steps (Adam, MSE against the hidden states) searched over every configuration
# of at most 2 GPUs (D, T, P with K <= 8, 1F1B and GPipe), the top 20 predictions run
# replayed as CUDA graphs (`distir grid-search --run-top 20 --cuda-graph`), at 8 x 512
# tokens, then three of them at 16 x 512. Skeletons to $OUT. Run from the project root,
# $OUT set, COMMIT holding the commit.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_a.log
echo "### project commit $(cat COMMIT)" > "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=h200-sxm ;; *) HW=h100-sxm ;; esac
echo "### profile $HW-graph" >> "$L"
export PYTHONPATH=$PWD:${PYTHONPATH:-}
S=/tmp/heldout_models; mkdir -p $S $OUT/skel $OUT/rows
MODELS="stablelm gpt_neox qwen2 olmo gptj"
s=$SECONDS
for n in $MODELS; do
  timeout 240 python3 grid_search/results/heldout_1gpu/export.py $n $S/$n.onnx \
    > $S/$n.export.log 2>&1 &
done
wait
for n in $MODELS; do
  tail -n 1 $S/$n.export.log >> "$L"
  python3 -m grid_search.skeleton strip $S/$n.onnx $OUT/skel/$n.skel.onnx >> "$L" 2>&1
done
(cd $OUT && tar czf skel.tgz skel && rm -rf skel)
echo "### exports after $((SECONDS - s)) s" >> "$L"
G="python3 -m distir grid-search --devices 2 --fewer-devices --hardware $HW-graph --max-microbatches 8 --schedules 1f1b gpipe --run-top 20 --cuda-graph"
search() {  # name batch
  local n=$1 b=$2
  timeout -s INT -k 20 110 $G --model $S/$n.onnx --dim batch=$b --dim seq=512 --train \
    --loss mse --optimizer adam -o $OUT/rows/${n}_b$b.csv >> "$L" 2>&1
  echo "### ${n}_b$b rc $? after $((SECONDS - s)) s" >> "$L"
  (cd $OUT && tar czf rows.tgz rows)
}
for n in $MODELS; do search $n 8; done
for n in stablelm qwen2 gptj; do search $n 16; done
rm -rf $OUT/rows
uptime >> "$L"
grep "###\|rror" "$L" | tail -30
