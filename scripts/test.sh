#!/usr/bin/env bash
# Set up .venv if needed, then run the test suite (CPU only; GPU tests skip themselves).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
