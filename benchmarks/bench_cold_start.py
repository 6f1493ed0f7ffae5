"""Benchmark of cold start: the first ``dtp`` + ``simulate`` of a small program in a fresh
process.

Not a test: it prints numbers. Run from the repository root::

    .venv/bin/python benchmarks/bench_cold_start.py [--runs 5] [--profile h200-sxm]

Each run is a fresh interpreter (``python -c``) that imports ``distir`` and the model and
transform modules, builds a small MLP training step (4 layers of 256), then times with
``time.perf_counter`` its first ``dtp`` (2/2/2/4) and its first ``simulate`` on the profile,
and a second ``dtp`` + ``simulate`` of another configuration (the warm figure). Interpreter
start and ``import distir`` are excluded: the figure is what loading rule tables, profiles
and fitted models costs the first analysis. Medians over ``--runs``, in milliseconds, with
Python's bytecode cache (an installed package) and without it (every module imported
lazily is compiled from source, as under ``PYTHONDONTWRITEBYTECODE=1``). The compiled
profile cache (``distir.analysis.hardware.cache_dir``) is warm in both: one untimed run
fills it.

Target (issue 20): first ``dtp`` + ``simulate`` <= 20 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _machine import machine_line  # noqa: E402

TARGET_MS = 20.0

CHILD = r"""
import json, sys, time
import distir
from distir.models.mlp import mlp
from distir.transforms import dtp
from distir.analysis.simulator import simulate
fn = mlp(batch_size=64, input_dim=256, hidden_dim=256, output_dim=256, num_layers=4)
t0 = time.perf_counter()
d = dtp(fn, dp=2, tp=2, pp=2, microbatches=4)
t1 = time.perf_counter()
s = simulate(d, sys.argv[1])
t2 = time.perf_counter()
d2 = dtp(fn, dp=1, tp=2, pp=2, microbatches=2)
s2 = simulate(d2, sys.argv[1])
t3 = time.perf_counter()
print(json.dumps({"dtp": t1 - t0, "simulate": t2 - t1, "warm": t3 - t2,
                  "ops": s.num_ops, "latency": s.latency_s}))
"""


def one_run(profile: str, env: dict[str, str]) -> dict[str, float]:
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    p = subprocess.run([sys.executable, "-c", CHILD, profile], cwd=root, env=env,
                       capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"the child process failed:\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--profile", default="h200-sxm")
    args = ap.parse_args(argv)
    print(f"# {machine_line()}; load average {os.getloadavg()[0]:.2f}; "
          f"profile {args.profile}")
    with tempfile.TemporaryDirectory() as tmp:
        # Two settings: Python's bytecode cache in use (as in an installed package; the
        # folder is warmed by one untimed run), and every module compiled from source
        # (PYTHONDONTWRITEBYTECODE=1, as in this project's development environment).
        base = {k: v for k, v in os.environ.items()
                if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
        settings = [("bytecode cached", {**base, "PYTHONPYCACHEPREFIX": tmp}),
                    ("no bytecode", {**base, "PYTHONDONTWRITEBYTECODE": "1"})]
        one_run(args.profile, settings[0][1])  # writes the bytecode and profile caches
        for label, env in settings:
            runs = [one_run(args.profile, env) for _ in range(args.runs)]

            def med(key: str, runs: list[dict[str, float]] = runs) -> float:
                return statistics.median(r[key] for r in runs) * 1e3

            first = statistics.median((r["dtp"] + r["simulate"]) * 1e3 for r in runs)
            print(f"{label}: first dtp {med('dtp'):.1f} ms, first simulate "
                  f"{med('simulate'):.1f} ms ({runs[0]['ops']:.0f} ops), both "
                  f"{first:.1f} ms (target <= {TARGET_MS:.0f} ms); a second dtp + simulate "
                  f"{med('warm'):.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
