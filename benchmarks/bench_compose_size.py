"""Program size and build time of ``compose_dtp`` (the spmd passes, ``dtp`` now) beside
``tower.dtp`` (the builder tower), on GPT-2 training steps with stages and microbatches.

    python benchmarks/bench_compose_size.py            # the three rows of docs/spmd.md
    python benchmarks/bench_compose_size.py --repeats 1

Prints, for ``dtp``, the composition with stage and layer functions, and the composition
written out (``stage_functions=False``): the ops in ``@main``, the ops of ``@main`` and of
every function it calls (each function counted once), the build time (best of
``--repeats``, process CPU seconds, so that other jobs on the machine count less), the
simulation time, the simulated step time and the peak memory of the most loaded device
on ``h100-sxm``. The composition with and without functions must simulate alike (checked).
Then the build times of ``dtp`` and the composition from one ``analyze`` of the model
(as a search over configurations builds them; best of ``--repeats``).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import distir  # noqa: E402
from distir.models import presets  # noqa: E402
from distir.transforms import analyze  # noqa: E402
from distir.transforms.spmd.compose import compose_dtp  # noqa: E402
from distir.transforms.tower import dtp  # noqa: E402  (the builder tower)

CASES = [  # (label, preset, overrides, (D, T, P, K))
    ("GPT-2 12 layers, d 1024, Adam, batch 32", "gpt2-350m-train",
     {"n_layer": 12, "batch_size": 32}, (2, 2, 2, 8)),
    ("gpt2-1.6b-train (24 layers), batch 32", "gpt2-1.6b-train", {"batch_size": 32},
     (2, 2, 2, 8)),
    ("gpt2-1.6b-train (24 layers), batch 32", "gpt2-1.6b-train", {"batch_size": 32},
     (1, 2, 4, 16)),
]


def _all_ops(fn: distir.Function) -> int:
    seen: dict[int, distir.Function] = {}
    todo = [fn]
    while todo:
        for op in todo.pop().ops:
            if op.callee is not None and id(op.callee) not in seen:
                seen[id(op.callee)] = op.callee
                todo.append(op.callee)
    return len(fn.ops) + sum(len(f.ops) for f in seen.values())


def _best(f: Callable[[], object], repeats: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeats):
        gc.collect()  # earlier runs' garbage is not this run's work
        t0 = time.process_time()
        out = f()
        best = min(best, time.process_time() - t0)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--hardware", default="h100-sxm")
    args = ap.parse_args()
    print(f"{'program':42} {'D':>2} {'T':>2} {'P':>2} {'K':>2} {'variant':10} {'@main':>7} "
          f"{'all ops':>7} {'build s':>8} {'sim s':>6} {'ms':>10} {'GiB':>7}")
    for label, name, over, (d, t, p, k) in CASES:
        fn = presets.build(name, **over)
        sims = {}
        builds = {"dtp": partial(dtp, fn, d, t, p, k, "1f1b"),
                  "composed": partial(compose_dtp, fn, d, t, p, k, "1f1b"),
                  "flat": partial(compose_dtp, fn, d, t, p, k, "1f1b", stage_functions=False)}
        for variant, build in builds.items():
            bt, prog = _best(build, args.repeats)
            assert isinstance(prog, distir.Function)
            st, sim = _best(partial(distir.simulate, prog, args.hardware), args.repeats)
            sims[variant] = sim
            peak = max(sim.peak_memory_bytes.values()) / 2**30  # type: ignore[attr-defined]
            print(f"{label:42} {d:2} {t:2} {p:2} {k:2} {variant:10} {len(prog.ops):7,} "
                  f"{_all_ops(prog):7,} {bt:8.3f} {st:6.2f} "
                  f"{sim.latency_s * 1e3:10.3f} {peak:7.3f}", flush=True)  # type: ignore
        an = analyze(fn)  # as the grid search builds many configurations from one analysis
        ta, _ = _best(partial(dtp, an, d, t, p, k, "1f1b"), args.repeats)
        tc, _ = _best(partial(compose_dtp, an, d, t, p, k, "1f1b"), args.repeats)
        print(f"{'':42} built from one analysis: dtp {ta:.3f} s, composed {tc:.3f} s "
              f"({tc / ta:.1f}x)", flush=True)
        a, b = sims["composed"], sims["flat"]
        assert abs(a.latency_s - b.latency_s) <= 1e-9 * b.latency_s  # type: ignore
        assert a.peak_memory_bytes == b.peak_memory_bytes  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
