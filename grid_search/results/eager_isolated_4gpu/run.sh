#!/bin/bash
# 4 GPUs, one lease. On 4 x H100: the held-out replayed study of ../passes_4gpu/ (its
# run.sh). On another card: the GPT-2 350M training step (float16, batch 8, a development
# workload) run eagerly in eight configurations, each op's host time in the timed steps and
# its own host cost with the device synchronised after every op (calibration.host_threads
# --per-op --isolated), in two launches; first this machine's host dispatch on the tiny
# calibration programs. Run from the project root, $OUT set.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run.log
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H100*) exec bash grid_search/results/passes_4gpu/run.sh ;;
esac
s=$SECONDS
timeout -s INT -k 20 90 torchrun --nproc_per_node 4 -m calibration.bench_dispatch measure \
    -o "$OUT/dispatch.csv" > "$OUT/dispatch.log" 2>&1
echo "### dispatch rc $? after $((SECONDS - s)) s" >> "$L"
C="1,1,1,1 4,1,1,1 1,4,1,1 2,2,1,1 1,1,4,4 1,1,4,8 2,1,2,4 1,2,2,8"
for launch in 1 2; do
  s=$SECONDS
  timeout -s INT -k 20 200 torchrun --nproc_per_node 4 -m calibration.host_threads \
      --configs $C --steps 6 --isolated 3 --env "launch$launch" \
      --per-op "$OUT/per_op.csv" -o "$OUT/threads.jsonl" >> "$L" 2>&1
  echo "### launch $launch rc $? after $((SECONDS - s)) s" >> "$L"
done
gzip "$OUT/per_op.csv"
uptime >> "$L"
grep "###\|step\|Error\|error" "$L" | tail -40
