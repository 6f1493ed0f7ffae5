"""``distir optimize``: the per-op parallelisation search (dispatches to grid_search/)."""

from __future__ import annotations

import argparse
import os
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "optimize", help="search a placement per op (Unity-style) and simulate the best",
        description="Search, per op, how every value is split, replicated or left partial "
        "over a device mesh (1-D and 2-D meshes of N devices), by dynamic programming over "
        "the program's layers; simulate the best plans, keep those that fit in memory, and "
        "print the fastest. See docs/spmd.md.")
    p.add_argument("--model",
                   help="FILE.onnx or FILE.dir; or mlp, gpt2, or a preset (mlp-1b, "
                   "gpt2-1.6b-train, ...), as for grid-search (required unless --run-plans)")
    p.add_argument("--devices", type=int,
                   help="number of devices N (required unless --run-plans)")
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
    g = p.add_argument_group("search limits")
    g.add_argument("--beam", type=int, default=64,
                   help="boundary states kept between segments (default: 64)")
    g.add_argument("--max-states", type=int, default=2000,
                   help="states kept per op inside a segment (default: 2000)")
    g.add_argument("--top-k", type=int, default=4,
                   help="plans of each mesh lowered and simulated (default: 4)")
    g.add_argument("--no-seeds", action="store_true",
                   help="do not add dtp's data/tensor plans (propagated seeds) to the "
                   "candidates")
    g.add_argument("--substitutions", nargs="*", metavar="RULE",
                   help="also search rewrites of the step (docs/substitutions.md): the "
                        "rules named, or all of them when none is named; --budget then "
                        "bounds the rewrite search (default 120 s)")
    g.add_argument("--depth", type=int, default=2,
                   help="with --substitutions: rewrites applied in sequence (default 2)")
    e = p.add_argument_group("where the meshes are searched")
    e.add_argument("--executor", default="local", choices=["local", "ray"],
                   help="here, one mesh after another (default), or one Ray task per mesh "
                   "(pip install 'distir[ray]'); the same plans either way")
    e.add_argument("--address", metavar="ADDR",
                   help="with --executor ray: the cluster for ray.init (HOST:PORT, "
                   "ray://HOST:PORT, auto, local); default: $RAY_ADDRESS, else a new local "
                   "instance")
    e.add_argument("--workers", type=int,
                   help="with --executor ray: the most meshes searched at once (default: "
                   "the cluster's CPUs)")
    r = p.add_argument_group("real runs")
    r.add_argument("--run-top", type=int, default=0, metavar="K",
                   help="run the K fastest fitting plans for real (PyTorch backend) and "
                   "print predicted vs measured")
    r.add_argument("--backend", default="nccl", choices=["nccl", "gloo"],
                   help="backend for --run-top and --run-plans (default: nccl)")
    r.add_argument("--csv", metavar="FILE",
                   help="with --run-top or --run-plans: write predicted and measured per plan "
                   "here (default: beside -o as PLAN-measured.csv)")
    r.add_argument("--save-plans", metavar="DIR",
                   help="write the --top fastest fitting plans to DIR (plan1.dir, ..., "
                   "plans.csv) to run later with --run-plans")
    r.add_argument("--run-plans", metavar="DIR",
                   help="run the plans that --save-plans wrote to DIR (no search)")
    r.add_argument("--cuda-graph", action="store_true",
                   help="plan for steps replayed as CUDA graphs: simulate without the "
                   "profile's host dispatch, and run --run-top/--run-plans each as a graph")
    r.add_argument("--steps", type=int, default=5, help="timed steps per real run (default 5)")
    r.add_argument("--warmup", type=int, default=2,
                   help="untimed steps before them (default 2)")
    from distir.cli.grid_search import add_size_arguments

    add_size_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from distir.analysis.hardware import load_hardware
    from distir.errors import ConfigError

    hw = load_hardware(args.hardware)
    hardware = hw.for_cuda_graphs() if args.cuda_graph else args.hardware
    if args.steps < 1 or args.warmup < 0:
        raise ConfigError(f"--steps {args.steps} --warmup {args.warmup}: need at least one "
                          "timed step and no negative warm-up")
    csv_out = args.csv or (os.path.splitext(args.out)[0] + "-measured.csv" if args.out
                           else None)
    if args.run_plans:
        from grid_search.optimize import run_saved_plans

        run_saved_plans(args.run_plans, backend=args.backend, out=csv_out,
                        hardware=args.hardware, steps=args.steps, warmup=args.warmup,
                        cuda_graph=args.cuda_graph)
        return 0
    if not args.model or args.devices is None:
        raise ConfigError("distir optimize needs --model and --devices (or --run-plans DIR)")
    from distir.cli.grid_search import size_arguments
    from grid_search.models import workload
    from grid_search.optimize import optimize_workload, report

    w = workload(args.model, None, dtype=args.dtype, **size_arguments(args))
    for flag, n in (("--beam", args.beam), ("--max-states", args.max_states),
                    ("--top-k", args.top_k), ("--top", args.top)):
        if n < 1:
            raise ConfigError(f"{flag} {n}: need at least 1")
    if args.depth < 0:
        raise ConfigError(f"--depth {args.depth}: give 0 or more rewrites")
    if args.substitutions:
        from distir.transforms.spmd.substitutions import by_name

        by_name(args.substitutions)  # an unknown rule: one line naming the known ones
    if args.run_top < 0:
        raise ConfigError(f"--run-top {args.run_top}: give a number of plans (0: none)")
    executor = None
    if args.executor == "ray":
        from grid_search.optimize import RayMeshes

        executor = RayMeshes(args.address, args.workers)
    elif args.address is not None or args.workers is not None:
        raise ConfigError("--address and --workers are for --executor ray")
    res, batch = optimize_workload(w, args.devices, hardware=hardware,
                                   batch_size=args.batch_size, budget_s=args.budget,
                                   beam=args.beam, max_states=args.max_states,
                                   top_k=args.top_k, seeded=not args.no_seeds,
                                   executor=executor, substitutions=args.substitutions,
                                   depth=args.depth)
    sim = res.simulation
    if args.substitutions is not None:
        applied = res.stats.get("substitutions") or ()
        rs = res.stats.get("rewrite_search", {})
        print(f"substitutions: {', '.join(applied) if applied else 'none applied'} "
              f"({rs.get('scored', '?')} rewritten programs scored)")
    on = args.hardware + (" (CUDA graphs)" if args.cuda_graph else "")
    print(report(res, f"{w.name} (batch {batch}) on {args.devices} x {on}: best "
                 f"{sim.latency_s * 1e3:.3f} ms on mesh {res.mesh} ({res.candidates[0].origin})",
                 top=args.top))
    if args.out:
        import distir

        with open(args.out, "w") as f:
            f.write(distir.dumps(res.program))
        print(f"plan: {args.out}", file=sys.stderr)
    if args.save_plans:
        from grid_search.optimize import save_plans

        files = save_plans(res, args.save_plans, args.top)
        print(f"plans: {len(files)} in {args.save_plans}", file=sys.stderr)
    if args.run_top:
        from grid_search.optimize import run_top_plans

        run_top_plans(res, args.run_top, backend=args.backend, out=csv_out,
                      hardware=args.hardware, steps=args.steps, warmup=args.warmup,
                      cuda_graph=args.cuda_graph)
    return 0
