"""``distir sync-search``: the fastest way, in simulation, to synchronise the gradients of a
data-parallel training step (DisCo's search over all-reduce bucketings, and every builder
of ``distir.transforms.synchronize``).

Prints the best strategy, every builder's simulated step time by name and how much faster
the best is; ``--json`` prints one JSON object instead; ``-o STRATEGY.json`` writes the
best strategy, which ``distir.transforms.synchronize(fn, json.load(...))`` applies.
"""

from __future__ import annotations

import argparse
import json
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sync-search", help="search how a data-parallel step synchronises "
                       "its gradients (simulated)",
                       description="Search the all-reduce bucketings of a data-parallel "
                       "training step (DisCo's Algorithm 1, scored by the simulator) and "
                       "simulate every synchronisation builder (per-gradient, ddp, "
                       "merge-all, chunk-k, ps, ps-lb, zero-1, zero-2).")
    p.add_argument("file", help="a .dir file: a data-parallel training step (or a "
                   "sequential one with --dp)")
    p.add_argument("--hardware", "-H", default="h200-sxm", metavar="H",
                   help="a profile name or a profile .json path (default h200-sxm)")
    p.add_argument("--dp", type=int, default=None, metavar="D",
                   help="first distribute the (sequential) step over D data-parallel "
                   "replicas with dtp")
    p.add_argument("--compress", choices=("fp16", "bf16"), default=None,
                   help="send every gradient in 16 bits (cast before, cast back after)")
    p.add_argument("--alpha", type=float, default=1.05,
                   help="keep candidates within ALPHA times the best (default 1.05)")
    p.add_argument("--beta", type=int, default=10,
                   help="neighbours simulated per search step (default 10)")
    p.add_argument("--patience", type=int, default=1000,
                   help="stop after this many steps without improvement (default 1000)")
    p.add_argument("--max-evals", type=int, default=None, metavar="N",
                   help="stop after N simulations")
    p.add_argument("--samples", type=int, default=200, metavar="N",
                   help="then N samples of AutoDist's guided sampling over per-variable "
                   "strategies (0: bucketings and builders only; default 200)")
    p.add_argument("--seed", type=int, default=0, help="seed of the neighbour sampling")
    p.add_argument("-o", "--output", metavar="STRATEGY.json", default=None,
                   help="write the best strategy as JSON")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object on standard output and nothing else")
    p.set_defaults(func=run_sync_search)


def run_sync_search(args: argparse.Namespace) -> int:
    import distir
    from distir.errors import ConfigError
    from grid_search.sync_search import describe, sync_search

    fn = distir.load(args.file).entry
    if args.dp is not None:
        if args.dp < 2:
            raise ConfigError(f"--dp {args.dp}: data parallelism needs at least 2 replicas")
        from distir.transforms import dtp

        fn = dtp(fn, dp=args.dp)
    else:
        from distir.errors import TransformError
        from distir.transforms.synchronize import gradients

        try:
            gradients(fn)
        except TransformError as e:
            raise ConfigError(f"{args.file}: {e.message}, or pass --dp D to distribute a "
                              "sequential step first") from None
    res = sync_search(fn, args.hardware, alpha=args.alpha, beta=args.beta,
                      patience=args.patience, max_evals=args.max_evals, seed=args.seed,
                      compress=args.compress, samples=args.samples)
    if args.output is not None:
        with open(args.output, "w", encoding="utf-8") as fh:
            json.dump(res.strategy(), fh, indent=1)
            fh.write("\n")
    if args.json:
        sys.stdout.write(json.dumps({"file": args.file, **res.to_dict()}) + "\n")
        return 0
    sys.stdout.write(describe(res))
    if args.output is not None:
        sys.stdout.write(f"strategy written to {args.output}\n")
    return 0
