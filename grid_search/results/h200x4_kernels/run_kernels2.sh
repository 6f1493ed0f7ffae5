#!/bin/bash
# As run_kernels.sh, with the profiled steps recording the GPU's activity only (kernels,
# copies, CUDA runtime calls; the host's ops not recorded, so the step is not slowed).
set -u
export NCCL_NVLS_ENABLE=0
nvidia-smi > "$OUT/nvidia-smi.txt"
(lscpu; echo; nproc; uptime) > "$OUT/host.txt" 2>&1
timeout -s INT -k 20 110 torchrun --nproc_per_node 4 -m calibration.bench_dispatch measure \
    -o "$OUT/dispatch.csv" > "$OUT/dispatch.log" 2>&1
echo "dispatch rc $?" >> "$OUT/host.txt"
timeout -s INT -k 20 300 python3 -m grid_search.study measure --model gpt2-350m-train \
    --dtype Float16 --batch-sizes 8 --max-devices 4 --max-microbatches 8 \
    --configs 4,1,1,1 2,2,1,1 1,4,1,1 1,2,2,8 2,1,2,4 1,1,4,4 1,1,1,1 \
    --profile /tmp/k --profile-kernels -o "$OUT/measured_b8.csv" > "$OUT/study.log" 2>&1
echo "study b8 rc $?" >> "$OUT/host.txt"
timeout -s INT -k 20 120 python3 -m grid_search.study measure --model gpt2-350m-train \
    --dtype Float16 --batch-sizes 32 --max-devices 4 --max-microbatches 8 \
    --configs 4,1,1,1 1,2,2,8 1,1,1,1 \
    --profile /tmp/k --profile-kernels -o "$OUT/measured_b32.csv" >> "$OUT/study.log" 2>&1
echo "study b32 rc $?" >> "$OUT/host.txt"
python3 -m grid_search.kernel_timeline /tmp/k/* -o "$OUT/kernels.json" > "$OUT/kernels.txt" 2>&1
(cd /tmp/k && tar czf "$OUT/traces_rank0.tgz" b8_d4_t1_p1_k1/rank0.json b8_d1_t2_p2_k8/rank*.json 2>/dev/null)
(uptime) >> "$OUT/host.txt" 2>&1
cat "$OUT/kernels.txt"; tail -12 "$OUT/study.log"
