"""``distir grid-search``: the simulated search over D/T/P/K (dispatches to grid_search/)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "grid-search", help="simulate every D/T/P/K configuration and rank them",
        description="Enumerate power-of-two data (D), tensor (T) and pipeline (P) degrees "
        "with D*T*P = N and microbatches K, transform and simulate each configuration, drop "
        "those that do not fit in device memory, and print the best ones.")
    p.add_argument("--model", required=True,
                   help="your model, FILE.onnx or FILE.dir; or mlp, gpt2, or a preset "
                   "(mlp-1b, mlp-17b, mlp-103b, gpt2-1.6b, gpt2-13b, gpt2-175b, "
                   "gpt2-1.6b-train, gpt2-13b-train, gpt2-175b-train)")
    p.add_argument("--preset", help="a preset of the model family (same names as --model)")
    p.add_argument("--devices", type=int, required=True, help="number of devices N")
    p.add_argument("--batch-sizes", type=int, nargs="+",
                   help="global batch sizes (training: one per run; inference: the free "
                   "variable); default: 8192 for MLP, 2^7..2^20 for GPT-2 inference, 64 for "
                   "GPT-2 training, a model file's own (--dim); a model file's batch "
                   "dimension is re-bound to each when it is symbolic")
    p.add_argument("--dim", action="append", default=[], metavar="NAME=N",
                   help="with FILE.onnx: bind a symbolic input dimension, e.g. --dim batch=8 "
                   "--dim seq=128 (repeatable); the batch dimension's binding is the batch "
                   "size searched unless --batch-sizes says otherwise")
    p.add_argument("--batch-input", metavar="NAME",
                   help="with a model file: the input that carries the batch (its first "
                   "dimension); default: the first input that is not a weight")
    p.add_argument("--hardware", default="h100-sxm",
                   help="hardware profile name or path (default: h100-sxm)")
    p.add_argument("-o", "--out", help="write results to this CSV, row by row")
    p.add_argument("--resume", action="store_true",
                   help="keep the rows already in --out and simulate only the rest")
    p.add_argument("--workers", type=int,
                   help="simulation processes (default: all cores); with --executor ray, "
                   "the most simulations at once (default: the cluster's CPUs)")
    p.add_argument("--executor", default="local", choices=["local", "ray"],
                   help="where simulations run: local processes (default) or a Ray "
                   "cluster (pip install 'distir[ray]')")
    p.add_argument("--address", metavar="ADDR",
                   help="with --executor ray: the cluster for ray.init (HOST:PORT, "
                   "ray://HOST:PORT, auto, local); default: $RAY_ADDRESS, else a cluster "
                   "started here with `ray start`, else a new local instance")
    p.add_argument("--fewer-devices", action="store_true",
                   help="also try configurations using fewer than N devices")
    p.add_argument("--sync", default="none", choices=["none", "searched"],
                   help="how data-parallel gradients travel: one all-reduce each (none), or "
                   "the fastest synchronisation distir sync-search finds per configuration "
                   "(searched; its choice in the row's reason)")
    p.add_argument("--transform", default="passes", choices=["passes", "tower"],
                   help="what writes each configuration's program: passes (default: dtp, "
                   "the spmd passes' composition: layout assignment, stage partition, "
                   "schedule, lowering), or tower (the builder dtp was before them, kept "
                   "to reproduce studies measured with it); --run-top runs the programs "
                   "so written")
    p.add_argument("--max-microbatches", type=int, default=128)
    p.add_argument("--schedules", nargs="+", default=["1f1b"], choices=["1f1b", "gpipe"],
                   help="pipeline schedules to try for training (default: 1f1b)")
    p.add_argument("--top", type=int, default=10, help="rows in the printed summary")
    p.add_argument("--plot", help="write the memory/throughput plot here (PNG); default: "
                   "beside --out")
    p.add_argument("--dtype", choices=["Float32", "Float16", "BFloat16"],
                   help="element type of the model (default: Float32)")
    p.add_argument("--run-top", type=int, default=0, metavar="K",
                   help="run the K best configurations for real and add measured columns")
    p.add_argument("--backend", default="nccl", choices=["nccl", "gloo"],
                   help="backend for --run-top (default: nccl)")
    p.add_argument("--cuda-graph", action="store_true",
                   help="plan for steps replayed as CUDA graphs: simulate without the "
                   "profile's host dispatch, and with --run-top run each step as a graph")
    add_size_arguments(p)
    from distir.cli import _train

    _train.add_arguments(p)
    p.set_defaults(func=run)



def add_size_arguments(p: argparse.ArgumentParser) -> None:
    """The sizes of the built-in families, ``--model mlp`` and ``--model gpt2``
    (``grid_search.models.workload`` takes them by these names)."""
    g = p.add_argument_group("MLP sizes (with --model mlp)")
    g.add_argument("--num-layers", type=int)
    g.add_argument("--width", type=int)
    g2 = p.add_argument_group("GPT-2 sizes (with --model gpt2)")
    g2.add_argument("--n-layer", type=int)
    g2.add_argument("--d-model", type=int)
    g2.add_argument("--n-head", type=int)
    g2.add_argument("--vocab-size", type=int)
    g2.add_argument("--seq-len", type=int)


def size_arguments(args: argparse.Namespace) -> dict[str, int | None]:
    """The values of ``add_size_arguments``'s options, by ``workload``'s keyword names."""
    return {k: getattr(args, k) for k in ("num_layers", "width", "n_layer", "d_model",
                                          "n_head", "vocab_size", "seq_len")}


def run(args: argparse.Namespace) -> int:
    from distir.cli import _train
    from distir.cli.importer import parse_dims
    from distir.errors import ConfigError
    from grid_search import enumerate_space, run_search, summarize, workload
    from grid_search.executors import make_executor
    from grid_search.models import default_batches

    w = workload(args.model, args.preset, train=_train.from_args(args),
                 dims=parse_dims(args.dim), batch_input=args.batch_input,
                 batch_sizes=args.batch_sizes, dtype=args.dtype, **size_arguments(args))
    # A bad profile is the user's to fix before anything is simulated (and would otherwise
    # fail every configuration alike): the same one-line error as `distir simulate`.
    from distir.analysis.hardware import load_hardware

    hw = load_hardware(args.hardware)
    hardware = hw.for_cuda_graphs() if args.cuda_graph else args.hardware
    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"--workers {args.workers}: need at least 1")
    if args.resume and not args.out:
        raise ConfigError("--resume needs -o/--out (the CSV to continue)")
    batches = args.batch_sizes or default_batches(w)
    src = w.source
    if src is not None and src.batch_dim is None and args.batch_sizes \
            and set(args.batch_sizes) != {src.own_batch}:
        print(f"distir: note: {args.model} has a fixed batch size {src.own_batch} (its input "
              f"%{src.batch_input} has no symbolic first dimension): only batch "
              f"{src.own_batch} is searched, not --batch-sizes "
              f"{' '.join(map(str, args.batch_sizes))}", file=sys.stderr)
        batches = [src.own_batch]
    schedules = args.schedules if w.training else ["gpipe"]
    configs = list(enumerate_space(w.name, args.devices, batches,
                                   fewer_devices=args.fewer_devices,
                                   max_microbatches=args.max_microbatches,
                                   schedules=schedules))
    # A model file is imported here once per batch size; the search and --run-top share it.
    w = w.prepared(sorted(set(batches)))
    executor = make_executor(args.executor, workers=args.workers, address=args.address)
    print(f"distir: {len(configs)} configurations of {w.name} on {args.devices} devices "
          f"({args.hardware}), {executor.describe()}"
          + (", written by the builder tower" if args.transform == "tower" else ""),
          file=sys.stderr)
    res = run_search(w, configs, hardware=hardware, out=args.out, resume=args.resume,
                     executor=executor, sync=args.sync, transform=args.transform)
    rows = res.rows
    if args.out:
        from grid_search.search import read_rows

        rows = read_rows(args.out)
    title = (f"{w.name} on {args.devices} x {args.hardware}"
             + (" (CUDA graphs)" if args.cuda_graph else "")
             + f": {len(rows)} configurations "
             f"simulated in {res.seconds:.1f} s"
             + (f" ({res.skipped} kept from {args.out})" if res.skipped else ""))
    print(summarize(rows, top=args.top, title=title))
    plot = args.plot or (os.path.splitext(args.out)[0] + ".png" if args.out else None)
    if plot:
        from grid_search.report import plot_memory_throughput

        plot_memory_throughput(rows, plot, title=f"{w.name}, {args.devices} devices")
        print(f"plot: {plot}", file=sys.stderr)
    if args.run_top:
        from grid_search.real import run_top

        # the programs the search simulated: its transform, its synchronisation
        run_top(rows, dataclasses.replace(
                    w, transform=args.transform,
                    sync="searched" if args.sync == "searched" else w.sync), args.run_top,
                out=args.out, backend=args.backend,
                hardware=hardware, cuda_graph=args.cuda_graph)
    return 0
