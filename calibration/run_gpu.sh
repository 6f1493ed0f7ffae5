#!/usr/bin/env bash
# Calibrate the hardware profile of this machine's GPUs (H100 -> h100-sxm, H200 -> h200-sxm).
#
# Run from the repository root on a machine with CUDA GPUs (2 or more for the collectives):
#
#     bash calibration/run_gpu.sh [OUTDIR]        # OUTDIR defaults to $OUT, else calibration/out
#
# It needs python3 with torch, numpy and scikit-learn (not lark: the parser is not used).
# Writes into OUTDIR: NAME.json (the profile), NAME.measurements.csv, NAME.report.md,
# NAME.overlap.json (compute beside an asynchronous all-reduce, with 2 or more GPUs),
# calibrate.log (progress) and nvidia-smi.txt; then installs the profile and its companions
# in calibration/profiles/ and puts the report into calibration/README.md. Takes about
# 2-4 minutes on 2 H100s.
set -euo pipefail
cd "$(dirname "$0")/.."

# NVLink multicast stays off (shared machines): in this shell and every spawned process.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY="${PYTHON:-python3}"
OUTDIR="${1:-${OUT:-calibration/out}}"
mkdir -p "$OUTDIR"

# CALIBRATE_NAME and CALIBRATE_ARGS (e.g. "--cpu --quick") exist to test this script on a CPU.
NAME="${CALIBRATE_NAME:-$("$PY" -c 'import torch
from calibration.calibrate import default_name
assert torch.cuda.is_available(), "no CUDA device"
print(default_name(torch.cuda.get_device_name(0)))')}"
echo "calibrating $NAME into $OUTDIR" >&2
nvidia-smi > "$OUTDIR/nvidia-smi.txt" 2>&1 || true

# Without scikit-learn, measure only; the fit then runs elsewhere from the CSV.
FIT=""
if ! "$PY" -c "import sklearn" 2>/dev/null; then
    echo "scikit-learn is missing: measuring only; afterwards run, where it is installed:" >&2
    echo "  distir calibrate --fit-only $OUTDIR/$NAME.measurements.csv" \
         "-o calibration/profiles/$NAME.json --base h100-sxm-datasheet" >&2
    FIT="--measure-only"
fi

status=0
# shellcheck disable=SC2086
"$PY" -m calibration -o "$OUTDIR/$NAME.json" --base h100-sxm-datasheet $FIT \
    ${CALIBRATE_ARGS:-} 2> >(tee "$OUTDIR/calibrate.log" >&2) || status=$?
if [ "$status" -ne 0 ]; then
    echo "calibration failed (exit $status); measurements so far are in $OUTDIR" >&2
    exit "$status"
fi
if [ -n "$FIT" ]; then
    exit 0
fi
# The compute lost beside an asynchronous all-reduce (interconnect.overlap_slowdown).
case " ${CALIBRATE_ARGS:-} " in *" --cpu "*) OVERLAP_ARGS="--cpu --trials 3" ;; *) OVERLAP_ARGS="" ;; esac
if [ -n "$OVERLAP_ARGS" ] || [ "$("$PY" -c 'import torch; print(torch.cuda.device_count())')" -ge 2 ]; then
    # shellcheck disable=SC2086
    "$PY" -m calibration.overlap --profile "$OUTDIR/$NAME.json" \
        --json "$OUTDIR/$NAME.overlap.json" $OVERLAP_ARGS 2>&1 | tee -a "$OUTDIR/calibrate.log" >&2
fi
cp "$OUTDIR/$NAME.json" "$OUTDIR/$NAME.measurements.csv" "$OUTDIR/$NAME.report.md" \
    calibration/profiles/
"$PY" -m calibration.readme "$OUTDIR/$NAME.report.md" calibration/README.md
echo "installed calibration/profiles/$NAME.json and updated calibration/README.md" >&2
