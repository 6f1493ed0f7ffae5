"""``distir optimize``: the per-op parallelisation search (dispatches to grid_search/)."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "optimize", help="search a placement per op (Unity-style) and simulate the best",
        description="Search, per op, how every value is split, replicated or left partial "
        "over a device mesh (1-D and 2-D meshes of N devices), by dynamic programming over "
        "the program's layers; simulate the best plans, keep those that fit in memory, and "
        "print the fastest. See docs/spmd.md.")
    p.add_argument("--model", required=True,
                   help="FILE.onnx or FILE.dir; or mlp, gpt2, or a preset (mlp-1b, "
                   "gpt2-1.6b-train, ...), as for grid-search")
    p.add_argument("--devices", type=int, required=True, help="number of devices N")
    p.add_argument("--hardware", default="h100-sxm",
                   help="hardware profile name or path (default: h100-sxm)")
    p.add_argument("--batch-size", type=int,
                   help="global batch size (default: the model's, as for grid-search)")
    p.add_argument("--budget", type=float, metavar="SECONDS",
                   help="stop trying further meshes once this many seconds are spent")
    p.add_argument("-o", "--out", metavar="PLAN.dir",
                   help="write the best plan's distributed program here (DistIR text)")
    p.add_argument("--dtype", choices=["Float32", "Float16", "BFloat16"])
    p.add_argument("--top", type=int, default=8, help="plans in the printed table")
    from distir.cli.grid_search import add_size_arguments

    add_size_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from distir.analysis.hardware import load_hardware
    from grid_search.models import workload
    from grid_search.optimize import optimize_workload, report

    load_hardware(args.hardware)
    from distir.cli.grid_search import size_arguments

    w = workload(args.model, None, dtype=args.dtype, **size_arguments(args))
    res, batch = optimize_workload(w, args.devices, hardware=args.hardware,
                                   batch_size=args.batch_size, budget_s=args.budget)
    sim = res.simulation
    print(report(res, f"{w.name} (batch {batch}) on {args.devices} x {args.hardware}: best "
                 f"{sim.latency_s * 1e3:.3f} ms on mesh {res.mesh}", top=args.top))
    if args.out:
        import distir

        with open(args.out, "w") as f:
            f.write(distir.dumps(res.program))
        print(f"plan: {args.out}", file=sys.stderr)
    return 0
