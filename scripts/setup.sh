#!/usr/bin/env bash
# Create (or refresh) the project's virtual environment in .venv with everything the
# main job and the tests need. torch is pinned to 2.13.0 here (scripts/constraints-cpu.txt),
# whose CPU build ships on the project's machines; pyproject.toml asks only for a range, so
# that installing distir beside a GPU machine's CUDA torch keeps it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "error: distir needs Python 3.11 or newer (found: $("$PY" --version 2>&1)); set PYTHON=" >&2
  exit 1
fi
stamp=.venv/.distir-installed
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] \
    || [ scripts/constraints-cpu.txt -nt "$stamp" ]; then
  echo "setting up .venv (first run takes a minute)..." >&2
  .venv/bin/python -m pip install -q --disable-pip-version-check \
    -c scripts/constraints-cpu.txt -e '.[dev,ray,verify]' >&2
  touch "$stamp"
fi
