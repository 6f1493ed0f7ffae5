#!/usr/bin/env bash
# Set up .venv if needed, then lint (ruff), type-check distir/ (mypy) and run the test suite
# (CPU only; GPU tests skip themselves). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check distir calibration grid_search tests benchmarks scripts
.venv/bin/mypy distir
exec .venv/bin/python -m pytest "$@"
