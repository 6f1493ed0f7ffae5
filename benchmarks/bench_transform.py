"""Benchmark of the D/T/P transform: ops produced per second.

Not a test: it prints numbers. Run from the repository root::

    .venv/bin/python benchmarks/bench_transform.py [--repeats 5] [--json]

For each case (GPT-2 175B at dp/tp/pp/K = 1/8/2/2 and MLP 103B at 4/2/2/16, both from
``distir.models.presets``) it builds the sequential step (not timed), then reports the
median over ``--repeats`` runs of

- ``analyze``: ``distir.transforms.analyze(fn)``, done once per model and batch size (the
  grid search reuses it for every configuration);
- ``dtp``: ``distir.transforms.dtp(analysis, ...)``, the per-configuration work (with
  ``--tower``, the builder ``dtp`` was before the spmd passes, ``distir.transforms.tower``);

and the size of the result counted two ways:

- *inlined*: ops with every call counted as its callee's ops (what a flat program, as the
  original DistIR produced, would hold);
- *written*: ops actually created (``@main`` plus every stage and layer function once).

``--flat`` writes every layer out in its stage function (no layer functions);
``--simulate HARDWARE`` also times ``distir.simulate`` of the result.

Rates are ops per second of ``analyze + dtp`` (a cold configuration) and of ``dtp`` alone (a
configuration of an analyzed model), in wall-clock time; the CPU time of the process is
printed too (steadier when other jobs share the cores). Target: >= 100,000 inlined ops/s
including the analysis, on this 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from distir.models import presets  # noqa: E402
from distir.transforms import analyze, dtp, tower  # noqa: E402

CASES = [("gpt2-175b", (1, 8, 2, 2)), ("mlp-103b", (4, 2, 2, 16))]
TARGET = 100_000.0


def _median_time(fn, repeats: int, first: list | None = None) -> tuple[float, float, object]:
    """Median wall-clock and CPU (process) seconds of ``fn()``, and its last result;
    ``first``, when given, receives the wall-clock seconds of the first run."""
    wall, cpu, out = [], [], None
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        out = fn()
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    if first is not None:
        first.append(wall[0])
    return statistics.median(wall), statistics.median(cpu), out


def run_case(name: str, cfg: tuple[int, int, int, int], repeats: int, flat: bool,
             simulate: str | None, transform: Any = dtp) -> dict:
    fn = presets.build(name)
    t_an, c_an, an = _median_time(lambda: analyze(fn), repeats)
    dp, tp, pp, k = cfg
    t_dtp, c_dtp, out = _median_time(lambda: transform(an, dp=dp, tp=tp, pp=pp,
                                                       microbatches=k,
                                                       layer_functions=not flat), repeats)
    sim_s, sim_first = None, []
    if simulate:
        import distir

        sim_s, _, _ = _median_time(lambda: distir.simulate(out, hardware=simulate), repeats,
                                   sim_first)
    inlined = out.num_ops(inline_calls=True)
    written = out.num_ops() + sum(len(f.ops) for f in out.callees())
    return {
        "model": name, "dp": dp, "tp": tp, "pp": pp, "microbatches": k,
        "sequential_ops": len(fn.ops), "analyze_s": t_an, "dtp_s": t_dtp,
        "analyze_cpu_s": c_an, "dtp_cpu_s": c_dtp,
        "inlined_per_cpu_s": inlined / (c_an + c_dtp),
        "ops_inlined": inlined, "ops_written": written,
        "inlined_per_s": inlined / (t_an + t_dtp), "inlined_per_s_dtp": inlined / t_dtp,
        "written_per_s": written / (t_an + t_dtp), "written_per_s_dtp": written / t_dtp,
        "layer_functions": not flat, "simulate_s": sim_s,
        "simulate_first_s": sim_first[0] if sim_first else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--flat", action="store_true",
                    help="write every layer out (dtp(..., layer_functions=False))")
    ap.add_argument("--simulate", metavar="HARDWARE", default=None,
                    help="also time distir.simulate of the result on this profile")
    ap.add_argument("--tower", action="store_true",
                    help="time the builder tower (distir.transforms.tower.dtp, dtp before "
                    "the spmd passes) instead of dtp")
    args = ap.parse_args()
    analyze(presets.build("mlp-1b"))  # warm-up: one-time imports are not the transform's
    transform = tower.dtp if args.tower else dtp
    rows = [run_case(n, c, args.repeats, args.flat, args.simulate, transform)
            for n, c in CASES]
    if args.json:
        print(json.dumps({"machine": platform.processor() or platform.machine(),
                          "cases": rows}))
        return
    print(f"D/T/P transform, median of {args.repeats} ({platform.python_version()}, "
          f"{os.cpu_count()} cores){', layers written out' if args.flat else ''}"
          f"{', the builder tower' if args.tower else ''}")
    for r in rows:
        cfg = f"{r['dp']}/{r['tp']}/{r['pp']}/{r['microbatches']}"
        ok = "ok" if r["inlined_per_s"] >= TARGET else "BELOW TARGET"
        print(f"{r['model']:>10} {cfg:>9}: analyze {r['analyze_s'] * 1e3:7.1f} ms, "
              f"dtp {r['dtp_s'] * 1e3:7.1f} ms; ops inlined {r['ops_inlined']:>7,}, "
              f"written {r['ops_written']:>6,}")
        print(f"{'':>21}inlined {r['inlined_per_s']:>10,.0f} ops/s ({ok}; dtp alone "
              f"{r['inlined_per_s_dtp']:,.0f}), written {r['written_per_s']:,.0f} ops/s "
              f"(dtp alone {r['written_per_s_dtp']:,.0f})")
        print(f"{'':>21}CPU time: analyze {r['analyze_cpu_s'] * 1e3:.1f} ms, dtp "
              f"{r['dtp_cpu_s'] * 1e3:.1f} ms, inlined {r['inlined_per_cpu_s']:,.0f} ops/s")
        if r["simulate_s"] is not None:
            print(f"{'':>21}simulate ({args.simulate}): first {r['simulate_first_s']:.3f} s, "
                  f"median {r['simulate_s']:.3f} s (the simulator caches across calls)")


if __name__ == "__main__":
    main()
