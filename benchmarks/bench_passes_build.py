"""Build time of replica 0's program through the spmd passes beside ``dtp_replica`` (the
builder tower), from one ``analyze`` shared by the configurations, as the grid search
builds them.

    python benchmarks/bench_passes_build.py                       # gpt2-1.6b-train, batch 32
    python benchmarks/bench_passes_build.py --model mlp-1b --repeat 5

Per configuration (D T P K, 1F1B): process CPU seconds of ``dtp_replica(..., fold_tp=True)``
and of ``plan_dtp(...).lower_replica(fold_tp=...)`` (folded where ``Composed.folds``), the
best of ``--repeat`` runs, each run from a fresh ``analyze`` (so the passes' propagation,
memoized per analysis and virtual mesh, is cold for the first configuration of a shape);
then the totals and their ratio.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from distir.models import presets  # noqa: E402
from distir.transforms import analyze, dtp_replica  # noqa: E402
from distir.transforms.plan import Analysis  # noqa: E402
from distir.transforms.spmd.compose import plan_dtp  # noqa: E402

CONFIGS = [(2, 2, 2, 8), (1, 2, 4, 16), (4, 1, 2, 4), (1, 1, 4, 8), (2, 4, 1, 1)]


def _timed(f: Callable[..., object], *args: object) -> float:
    gc.collect()
    t = time.process_time()
    f(*args)
    return time.process_time() - t


def _tower(an: Analysis, c: tuple[int, ...]) -> None:
    dtp_replica(an, dp=c[0], tp=c[1], pp=c[2], microbatches=c[3], schedule="1f1b",
                fold_tp=True)


def _passes(an: Analysis, c: tuple[int, ...]) -> None:
    plan = plan_dtp(an, *c, "1f1b")
    plan.lower_replica(fold_tp=c[1] > 1 and plan.folds())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="gpt2-1.6b-train")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    fn = presets.build(args.model, batch_size=args.batch_size)
    best: dict[tuple[int, ...], list[float]] = {c: [float("inf")] * 2 for c in CONFIGS}
    for _ in range(args.repeat):
        an = analyze(fn)
        for c in CONFIGS:
            best[c][0] = min(best[c][0], _timed(_tower, an, c))
        for c in CONFIGS:
            best[c][1] = min(best[c][1], _timed(_passes, an, c))
    print(f"{args.model} batch {args.batch_size}, best of {args.repeat} (process CPU s)")
    print(f"{'D T P K':>10} {'dtp_replica':>12} {'passes':>8} {'ratio':>6}")
    for c, (a, b) in best.items():
        print(f"{' '.join(map(str, c)):>10} {a:12.3f} {b:8.3f} {b / a:6.2f}")
    a, b = (sum(x[i] for x in best.values()) for i in range(2))
    print(f"{'total':>10} {a:12.3f} {b:8.3f} {b / a:6.2f}")


if __name__ == "__main__":
    main()
