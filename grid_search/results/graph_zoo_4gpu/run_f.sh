#!/bin/bash
# Call F (4 GPUs): why call D's training runs failed (run_top now keeps the reason), then
# calibration.steady on GPU 0 (../graph_heldout_4gpu/run_e.sh's measurement).
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_f.log
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
D=grid_search/results/graph_zoo_4gpu
M=/tmp/gpt2_hf.onnx
s=$SECONDS
timeout 120 python3 $D/export_hf_gpt2.py $M >> "$L" 2>&1
echo "### export rc $? after $((SECONDS - s)) s" >> "$L"
s=$SECONDS
timeout -s INT -k 20 120 python3 -m distir grid-search --model $M --dim batch=16 --dim seq=512 \
    --devices 4 --hardware h200-sxm --max-microbatches 4 --run-top 2 --train \
    --loss cross_entropy --optimizer adam -o "$OUT/hf_gpt2_train_eager_f.csv" >> "$L" 2>&1
echo "### train eager rc $? after $((SECONDS - s)) s" >> "$L"
grep -i "error\|refused\|not measured" "$L" | head -20
s=$SECONDS
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv >> "$L" 2>&1
timeout -s INT -k 20 240 python3 -m calibration.steady -o "$OUT/steady.csv" --load 2 >> "$L" 2>&1
echo "### steady rc $? after $((SECONDS - s)) s" >> "$L"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv >> "$L" 2>&1
grep -v "configurations, .* elapsed" "$L" | tail -45
