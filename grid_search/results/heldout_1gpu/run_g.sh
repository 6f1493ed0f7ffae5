#!/bin/bash
# 1 GPU (1 x H200 here). Six more token models that no cost-model or memory work has
# looked at (export.py: StableLM, GPT-NeoX, Qwen2, Llama, OLMo, GPT-J blocks), after the
# liveness of called layers was made the inlined program's (returned views hold their
# storage). `bash run_g.sh g`: exports (skeletons to $OUT), then (1) their one-GPU steps
# at 8 and 16 x 512 tokens as run.sh measures them (replayed, float32, Adam), and (2) out
# of memory at the margin for three of them: the cap 1% above the predicted peak at 8 x
# 512 (pick_cap.py --above 8), `study measure --memory-check` of 8 (predicted to fit by
# 1%) and 9 (predicted out), eager, each in a session of its own. `bash run_g.sh h`: the
# margin checks of the other three. Run from the project root, $OUT set, COMMIT holding
# the commit.
set -u
R=grid_search/results
L=$OUT/run_$1.log
echo "### project commit $(cat COMMIT)" > "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
export PYTHONPATH=$PWD:${PYTHONPATH:-} NCCL_NVLS_ENABLE=0
S=/tmp/heldout_models; mkdir -p $S $OUT/skel $OUT/rows $OUT/mem
TOK="--dim seq=512 --train --loss mse --optimizer adam"
case $1 in
  g) EXPORTS="stablelm gpt_neox qwen2 llama olmo gptj"; MARGIN="stablelm gpt_neox qwen2" ;;
  h) EXPORTS="llama olmo gptj"; MARGIN="llama olmo gptj" ;;
esac
s=$SECONDS
for n in $EXPORTS; do
  timeout 240 python3 $R/heldout_1gpu/export.py $n $S/$n.onnx > $S/$n.export.log 2>&1 &
done
wait
for n in $EXPORTS; do
  tail -n 1 $S/$n.export.log >> "$L"
  [ "$1" = g ] && python3 -m grid_search.skeleton strip $S/$n.onnx $OUT/skel/$n.skel.onnx >> "$L" 2>&1
done
echo "### exports after $((SECONDS - s)) s" >> "$L"
if [ "$1" = g ]; then
  for n in $EXPORTS; do
    timeout 200 python3 -m grid_search.study measure --model $S/$n.onnx $TOK \
      --batch-sizes 8 16 --max-devices 1 --max-microbatches 1 --cuda-graph \
      --hardware h200-sxm-graph -o $OUT/rows/$n.csv >> $OUT/rows/measure.log 2>&1
    echo "### $n rc $? after $((SECONDS - s)) s" >> "$L"
  done
fi
for n in $MARGIN; do
  cap=$(timeout 120 python3 $R/elementwise_order/pick_cap.py --model $S/$n.onnx $TOK \
        --batch-sizes 8 9 --above 8 --headroom 0.01 2>> "$L")
  echo "### $n cap $cap after $((SECONDS - s)) s" >> "$L"
  timeout 200 python3 -m grid_search.study measure --model $S/$n.onnx $TOK \
    --batch-sizes 8 9 --max-devices 1 --max-microbatches 1 --memory-check \
    --memory-limit $cap --margin 0.2 --max-configs 5 --hardware h200-sxm --steps 1 \
    --warmup 1 -o $OUT/mem/$n.csv >> "$L" 2>&1
  echo "### $n rc $? after $((SECONDS - s)) s" >> "$L"
done
(cd $OUT && tar czf skel_$1.tgz skel && rm -rf skel && tar czf rows_$1.tgz rows mem && rm -rf rows mem)
uptime >> "$L"
grep "###\|rror\|predicted" "$L" | tail -40
