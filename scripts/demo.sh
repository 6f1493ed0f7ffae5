#!/usr/bin/env bash
# Set up .venv if needed, then run the main job on bundled defaults: a simulated grid search
# of the MLP 1B training step (the DistIR paper's mlp-1b preset) over 16 GPUs with the
# calibrated H200 profile, printing the best configurations and the best pure strategies.
# Extra arguments are passed to `distir grid-search` (e.g. --devices 8, --hardware h100-sxm).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
mkdir -p out
exec .venv/bin/distir grid-search --model mlp-1b --devices 16 --hardware h200-sxm \
    -o out/mlp-1b_16gpu.csv "$@"
