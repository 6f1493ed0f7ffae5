#!/bin/bash
# Call H (4 x H100): is one card of the lease slower? The held-out GPT-2 12 x 2560 training
# step (bfloat16, batch 8, one GPU, replayed) alone on GPU 0 and on GPU 3, then on all four
# GPUs at once (four independent one-GPU runs); clocks, power and throttle reasons before
# and after. Run from the project root, $OUT set.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/each_gpu.log
Q="nvidia-smi --query-gpu=index,uuid,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu,clocks_throttle_reasons.active --format=csv"
$Q >> "$L"
M="python3 -m grid_search.study measure --dtype BFloat16 --batch-sizes 8 --max-devices 1 --cuda-graph --timeout 40 --hardware h100-sxm --model gpt2-12-2560-20-train"
for k in 0 3; do CUDA_VISIBLE_DEVICES=$k timeout 40 $M -o $OUT/solo_$k.csv 2>&1 | grep "measured D" | sed "s/^/solo GPU $k: /" >> "$L"; done
for k in 0 1 2 3; do (CUDA_VISIBLE_DEVICES=$k timeout 50 $M -o $OUT/par_$k.csv 2>&1 | grep "measured D" | sed "s/^/together GPU $k: /" >> "$L") & done
sleep 12; $Q >> "$L"; wait
$Q >> "$L"
cat "$L"
