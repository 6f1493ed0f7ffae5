#!/usr/bin/env bash
# Set up .venv if needed, then run the main job on bundled defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
for f in examples/*.dir; do
  echo "== $f" >&2
  .venv/bin/distir check "$f"
done
