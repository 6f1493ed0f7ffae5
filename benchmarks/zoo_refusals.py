"""How many D/T/P/K configurations of the zoo's models the transform refuses, and why.

Not a test: it prints counts. Run from the repository root (the zoo exports are cached under
``.pytest_cache/distir-zoo``)::

    PYTHONPATH=. .venv/bin/python benchmarks/zoo_refusals.py [--full] [--models a,b]
        [--transform passes|tower]

Grid: every zoo model, both torch exporters, its inference program and its training step
(``training_step(fn, loss="cross_entropy", optimizer="sgd")``), every ``(dp, tp, pp)`` with
``dp·tp·pp <= 8`` (38 triples) and ``K`` in 1, 2, 4, 8. The batch is ``--batch`` (default
6720 = 64·105, so that every ``dp·K`` divides it and no refusal is the batch size's). Each
model and mode is analysed once; each configuration is checked by ``Plan`` (the checks that
refuse: divisibility, stages, the batch split), or, with ``--full``, transformed by ``dtp``
(slower: the whole program is written). ``--transform passes`` checks the spmd passes'
composition instead: ``plan_dtp`` (layout assignment, stages, schedule), or with ``--full``
``compose_dtp`` (lowered too); ``--execute`` then runs ``compose_dtp``'s programs.

Prints one line per (model, exporter, mode) with its refusals, the refusal reasons grouped
(numbers stripped), and the totals: overall, and at ``dp, tp, pp <= 4`` for GPT-2, Llama,
BERT, ViT and ResNet-50 (issue 16 asks for none there).

``--execute N`` also runs, per (model, exporter, mode), ``N`` configurations drawn at
random (``--seed``) among those of the grid that a batch of 8 admits, through the reference
executor (``self_contained=True``) against the sequential program at batch 8, and counts
those whose results differ (more than ``1e-4 * (1 + max |x|)``).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections import Counter
from itertools import product
from typing import Any

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import distir  # noqa: E402
import distir.analysis  # noqa: E402
from distir.errors import DistIRError, TransformError  # noqa: E402
from distir.transforms import analyze, training_step  # noqa: E402
from distir.transforms.plan import Plan  # noqa: E402
from distir.transforms.spmd import compose_dtp, plan_dtp  # noqa: E402
from distir.transforms.tower import dtp  # noqa: E402

KEY_MODELS = ("gpt2", "llama", "bert", "vit", "resnet50")
"""The models issue 16 wants refused nowhere at D, T, P <= 4."""


def triples(limit: int = 8) -> list[tuple[int, int, int]]:
    """Every ``(dp, tp, pp)`` of positive degrees with ``dp·tp·pp <= limit``."""
    r = range(1, limit + 1)
    return [(d, t, p) for d, t, p in product(r, r, r) if d * t * p <= limit]


def _reason(msg: str) -> str:
    """A refusal message with its numbers and names stripped, to group refusals."""
    msg = re.sub(r"%[\w.:/-]+", "%v", msg)
    msg = re.sub(r"\(shape [^)]*\)", "(shape)", msg)
    return re.sub(r"\d+", "N", msg)[:140]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--full", action="store_true", help="run dtp, not only Plan's checks")
    ap.add_argument("--batch", type=int, default=6720)
    ap.add_argument("--models", default="", help="comma-separated zoo names (default: all)")
    ap.add_argument("--verbose", action="store_true", help="print every refusal")
    ap.add_argument("--execute", type=int, default=0, metavar="N",
                    help="run N sampled configurations per model and mode at batch 8")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--transform", choices=("passes", "tower"), default="passes",
                    help="the spmd passes' composition (dtp, the default) or the builder "
                    "tower dtp was before")
    args = ap.parse_args()
    passes = args.transform == "passes"

    from tests.zoo.export import ExportFailed, exported
    from tests.zoo.models import SPECS

    names = set(args.models.split(",")) if args.models else None
    grid = [(d, t, p, k) for d, t, p in triples() for k in (1, 2, 4, 8)]
    total = refused = key_total = key_refused = 0
    reasons: Counter[str] = Counter()
    ran = wrong = 0
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    for spec in SPECS:
        if names and spec.name not in names:
            continue
        for ex in ("torchscript", "dynamo"):
            try:
                path = exported(spec, ex).path
            except ExportFailed:
                print(f"{spec.name:20s} {ex:11s} does not export")
                continue
            m = distir.import_onnx(path, dims=spec.dims(batch=args.batch))
            for mode in ("inference", "training"):
                fn = m.entry if mode == "inference" else training_step(
                    m.entry, loss="cross_entropy", optimizer="sgd")
                an = analyze(fn)
                n = 0
                for d, t, p, k in grid:
                    key = spec.name in KEY_MODELS and max(d, t, p) <= 4
                    try:
                        if passes and args.full:
                            compose_dtp(an, d, t, p, k)
                        elif passes:
                            plan_dtp(an, d, t, p, k)
                        elif args.full:
                            dtp(an, dp=d, tp=t, pp=p, microbatches=k)
                        else:
                            Plan(an, d, t, p, k, "1f1b")
                    except TransformError as e:
                        n += 1
                        key_refused += key
                        reasons[_reason(str(e))] += 1
                        if args.verbose or key:
                            print(f"  refused {spec.name} {ex} {mode} D{d}T{t}P{p}K{k}: {e}")
                    except DistIRError as e:  # not a refusal: an internal error
                        print(f"  ERROR {spec.name} {ex} {mode} D{d}T{t}P{p}K{k}: {e!r}")
                        n += 1
                    key_total += key
                refused += n
                total += len(grid)
                print(f"{spec.name:20s} {ex:11s} {mode:9s} refused {n:3d} of {len(grid)}",
                      flush=True)
                if args.execute:
                    r = _execute(spec, path, mode, grid, args.execute, rng, passes)
                    ran += r[0]
                    wrong += r[1]
    print("\nreasons:")
    for r, c in reasons.most_common():
        print(f"  {c:5d}  {r}")
    print(f"\nrefused {refused} of {total} ({100 * refused / max(total, 1):.1f}%); "
          f"at D, T, P <= 4 for {', '.join(KEY_MODELS)}: {key_refused} of {key_total}; "
          f"{time.perf_counter() - t0:.0f} s")
    if args.execute:
        print(f"executed {ran} sampled configurations at batch 8: {wrong} differ from the "
              "sequential results")


def _execute(spec: Any, path: str, mode: str, grid: list, n: int,
             rng: np.random.Generator, passes: bool = False) -> tuple[int, int]:
    """Run ``n`` sampled configurations of ``grid`` that batch 8 admits (by ``dtp``, or
    with ``passes`` by ``compose_dtp``); (run, wrong)."""
    m = distir.import_onnx(path, dims=spec.dims(batch=8))
    fn = m.entry
    ins = [t.numpy() for t in spec.inputs(8, 8)]
    if mode == "training":
        fn = training_step(fn, loss="cross_entropy", optimizer="sgd", reduction="mean")
        target = distir.analysis.type_env(fn)[fn.params[-1]]
        ins.append(rng.integers(0, 3, size=target.shape).astype(np.int64))
    an = analyze(fn)
    ok = []
    for cfg in grid:
        try:
            if passes:
                plan_dtp(an, *cfg)
            else:
                Plan(an, *cfg, "1f1b")
        except TransformError:
            continue
        ok.append(cfg)
    want = distir.execute(fn, ins)
    ran = wrong = 0
    for i in rng.choice(len(ok), size=min(n, len(ok)), replace=False):
        d, t, p, k = ok[int(i)]
        prog = compose_dtp(an, d, t, p, k, self_contained=True) if passes else \
            dtp(an, dp=d, tp=t, pp=p, microbatches=k, self_contained=True)
        got = distir.execute(prog, ins, check_types=False)
        ran += 1
        bad = any(np.shape(g) != np.shape(w) or np.max(np.abs(np.asarray(g) - w), initial=0)
                  > 1e-4 * (1 + np.max(np.abs(w), initial=0)) for g, w in zip(got, want))
        if bad:
            wrong += 1
            print(f"  DIFFERS {spec.name} {mode} D{d}T{t}P{p}K{k}")
    return ran, wrong


if __name__ == "__main__":
    main()
