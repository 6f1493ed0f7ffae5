#!/bin/bash
# One 4-GPU call: the held-out transformer of ../heldout_bf16/ measured again (its programs
# changed since), after the host dispatch of this machine (calibration.bench_dispatch).
# Run from the project copy's root with $OUT set; every step is bounded so that the whole
# stays under LIMIT seconds, and every CSV is written row by row straight into $OUT.
set -u
LIMIT=${LIMIT:-420}
START=$SECONDS
L=$OUT/run.log
left() { echo $((LIMIT - (SECONDS - START))); }
step() {  # step MAX_SECONDS COMMAND...: run it under a time limit, log it and its time
  local t=$1; shift
  local l; l=$(left); [ "$t" -gt "$l" ] && t=$l
  if [ "$t" -lt 25 ]; then echo "### skipped, $t s left: $*" >> "$L"; return 1; fi
  echo "### $* (limit $t s)" >> "$L"
  local s=$SECONDS
  timeout -s INT -k 20 "$t" "$@" >> "$L" 2>&1
  local rc=$?
  echo "### rc $rc after $((SECONDS - s)) s" >> "$L"
  return $rc
}
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
nvidia-smi -L >> "$L"
python3 -c "import sys,torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version(), torch.cuda.device_count(), 'x', torch.cuda.get_device_name(0))" >> "$L" 2>&1
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) HW=calibration/profiles/h200-sxm.json ;;
  *) HW=calibration/profiles/h100-sxm.json ;;
esac
echo "### profile $HW" >> "$L"
S="python3 -m grid_search.study"
step 100 torchrun --nproc_per_node 4 -m calibration.bench_dispatch measure -o "$OUT/dispatch.csv"
step 230 $S measure --model gpt2-16-1536-12-train --dtype BFloat16 --batch-sizes 8 32 \
  --max-devices 4 --max-microbatches 8 -o "$OUT/gpt2_16x1536_train_bf16_measured.csv"
step 60 $S measure --model gpt2-16-1536-12 --dtype BFloat16 --batch-sizes 8 32 \
  --max-devices 4 --max-microbatches 4 -o "$OUT/gpt2_16x1536_bf16_measured.csv"
echo "### done after $((SECONDS - START)) s" >> "$L"
