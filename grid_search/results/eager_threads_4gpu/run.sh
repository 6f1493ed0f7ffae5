#!/bin/bash
# 4 GPUs, one lease. On 4 x H100: the held-out replayed study of ../passes_4gpu/ (its
# run.sh, stages weighed with h100-sxm). On another card: where a host-bound eager step's
# host time goes (calibration.host_threads): the GPT-2 350M training step (float16, batch 8,
# a development workload) in seven configurations, each rank's host clock, step times and
# per-thread CPU time, under the default environment and with single PyTorch/NCCL
# switches changed. Run from the project root, $OUT set.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run.log
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H100*) exec bash grid_search/results/passes_4gpu/run.sh ;;
esac
C="4,1,1,1 2,2,1,1 1,4,1,1 2,1,2,4 1,2,2,8 1,1,4,4 1,1,1,1"
probe() {  # label, then environment assignments
  local label=$1; shift
  local s=$SECONDS
  env "$@" timeout -s INT -k 20 150 torchrun --nproc_per_node 4 -m calibration.host_threads \
      --configs $C --env "$label" -o "$OUT/threads.jsonl" >> "$L" 2>&1
  echo "### $label rc $? after $((SECONDS - s)) s" >> "$L"
}
probe default
probe no_flight_recorder TORCH_NCCL_TRACE_BUFFER_SIZE=0
probe no_monitoring TORCH_NCCL_ENABLE_MONITORING=0
probe default_again
uptime >> "$L"
grep "###\|step\|Error\|error" "$L" | tail -60
