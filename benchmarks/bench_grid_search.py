"""Wall time of whole searches: the MLP 1B space at one batch size (75 configurations on 16
GPUs) and the full GPT-2 175B inference space (batch sizes 2^7 to 2^20, 1,050
configurations), each transformed and simulated in a process pool.

    .venv/bin/python benchmarks/bench_grid_search.py [--workers 2] [--skip-gpt2] \
        [--transform passes|tower]

Targets on the project's 2-core machine: MLP 1B in <= 10 s (the original DistIR took 97 s on
this kind of machine, docs/performance.md says where that figure comes from), GPT-2 175B in
<= 15 minutes; issue 20's: <= 2 s and <= 60 s. The CPU seconds (this process and its
workers) are printed beside the wall time: on a shared machine they vary less with the load.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def _cpu() -> float:
    """CPU seconds of this process and of its finished children (the pool's workers)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
        resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def one(model: str, batches: list[int], hardware: str, workers: int, schedules: list[str],
        transform: str = "passes") -> tuple[float, float, int, int]:
    """Wall seconds, CPU seconds (this process and the workers: on a shared machine the
    CPU time varies less with the load than the wall time), configurations, simulated."""
    from grid_search import enumerate_space, run_search, workload

    w = workload(model)
    configs = list(enumerate_space(w.name, 16, batches, schedules=schedules))
    with tempfile.TemporaryDirectory() as d:
        c0 = _cpu()
        t0 = time.perf_counter()
        res = run_search(w, configs, hardware=hardware, out=os.path.join(d, "r.csv"),
                         workers=workers, progress=None, transform=transform)
        dt = time.perf_counter() - t0
        cpu = _cpu() - c0
    ok = sum(1 for r in res.rows if r["status"] in ("ok", "oom"))
    return dt, cpu, len(configs), ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--hardware", default="h200-sxm")
    ap.add_argument("--skip-gpt2", action="store_true")
    ap.add_argument("--transform", default="passes", choices=["passes", "tower"],
                    help="what writes the programs (default passes: dtp; tower: the builder "
                    "dtp was before the spmd passes)")
    args = ap.parse_args()
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, {args.workers} workers, {args.hardware}, "
          f"--transform {args.transform}")
    dt, cpu, n, ok = one("mlp-1b", [8192], args.hardware, args.workers, ["1f1b"],
                         args.transform)
    print(f"mlp-1b, batch 8192:           {n:5d} configurations ({ok} simulated) in "
          f"{dt:7.1f} s, {cpu:7.1f} CPU s  (target <= 10 s, issue 20: <= 2 s; original "
          "DistIR 97 s)", flush=True)
    if not args.skip_gpt2:
        dt, cpu, n, ok = one("gpt2-175b", [2 ** k for k in range(7, 21)], args.hardware,
                             args.workers, ["gpipe"], args.transform)
        print(f"gpt2-175b, batch 2^7..2^20:  {n:5d} configurations ({ok} simulated) in "
              f"{dt:7.1f} s, {cpu:7.1f} CPU s  (target <= 900 s, issue 20: <= 60 s)")


if __name__ == "__main__":
    main()
