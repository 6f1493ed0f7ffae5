#!/bin/bash
# Call A (4 GPUs): the backend's GPU tests (CUDA graphs among them), then the calibration with
# every compute family timed by its device time alone (`--device-time`, replayed graphs), the
# profile for steps replayed as CUDA graphs. Run from the project copy's root with $OUT set.
set -u
export NCCL_NVLS_ENABLE=0
L=$OUT/run_a.log
echo "### project commit $(cat COMMIT)" >> "$L"
nvidia-smi -L >> "$L"; (nproc; uptime) >> "$L" 2>&1
python3 -c "import sys,torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version())" >> "$L" 2>&1
timeout -s INT -k 20 150 python3 -m pytest -q -p no:cacheprovider tests/backend/test_gpu.py \
    > "$OUT/gpu_tests.log" 2>&1
echo "### gpu tests rc $?" >> "$L"
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) NAME=h200-sxm-graph ;;
  *) NAME=h100-sxm-graph ;;
esac
mkdir -p "$OUT/cal"
s=$SECONDS
CALIBRATE_NAME=$NAME CALIBRATE_ARGS="--device-time" timeout -s INT -k 20 360 \
    bash calibration/run_gpu.sh "$OUT/cal" >> "$L" 2>&1
echo "### calibrate $NAME rc $? after $((SECONDS - s)) s" >> "$L"
(cd "$OUT" && tar czf cal.tgz cal && rm -rf cal)
uptime >> "$L"
tail -4 "$OUT/gpu_tests.log"; tail -25 "$L"
