"""``distir transform``: distribute a sequential step with data, tensor and pipeline
parallelism (``distir.transforms.dtp``) and print the distributed program."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("transform", help="distribute a step over dp·tp·pp devices (D/T/P/K)",
                       description="Distribute the entry function of a .dir file with data "
                       "(--dp), tensor (--tp) and pipeline (--pp) parallelism, the batch of "
                       "each replica split in --microbatches. Device (d*pp + s)*tp + t holds "
                       "rank t of stage s of replica d. Prints the program, or writes it to "
                       "-o and prints a summary.")
    p.add_argument("file", help="a .dir file holding a sequential (single-device) step")
    p.add_argument("--dp", type=int, default=1, metavar="D", help="data-parallel replicas")
    p.add_argument("--tp", type=int, default=1, metavar="T", help="tensor-parallel ranks")
    p.add_argument("--pp", type=int, default=1, metavar="P", help="pipeline stages")
    p.add_argument("--microbatches", "-k", type=int, default=1, metavar="K",
                   help="microbatches per replica")
    p.add_argument("--schedule", choices=("gpipe", "1f1b"), default="1f1b",
                   help="pipeline schedule of a training step (default 1f1b)")
    p.add_argument("--self-contained", action="store_true",
                   help="take the sequential parameters on device 0 and return the "
                   "sequential results there (for differential testing); by default the "
                   "parameters are already placed")
    p.add_argument("--batch-input", action="append", default=None, metavar="NAME",
                   help="a parameter whose axis 0 is the batch (repeat for several); by "
                   "default the inputs not bound to initializers")
    p.add_argument("--one-replica", action="store_true",
                   help="for simulation: write data-parallel replica 0 alone, its gradient "
                   "all-reduces as ReplicaAllreduce over every replica's devices, and, "
                   "where the tensor-parallel ranks run alike, rank 0 alone, its "
                   "collectives as PeerAllreduce/PeerAllgather over every rank "
                   "(dtp_replica); `distir simulate` gives every replica's and rank's "
                   "figures")
    p.add_argument("--hardware", "-H", default=None, metavar="H",
                   help="hardware profile (name or path) weighing the ops where pipeline "
                   "stages are balanced by cost: the one you will simulate (default "
                   "h100-sxm)")
    p.add_argument("-o", "--output", metavar="OUT.dir", default=None,
                   help="write the program here instead of standard output")
    p.set_defaults(func=run_transform)


def run_transform(args: argparse.Namespace) -> int:
    import distir
    from distir.errors import ConfigError
    from distir.transforms import dtp, dtp_replica

    m = distir.load(args.file)
    peers = 1
    if args.one_replica:
        if args.self_contained:
            raise ConfigError("--one-replica writes a program for simulation; "
                              "--self-contained is for executing one: choose one")
        rp = dtp_replica(m.entry, dp=args.dp, tp=args.tp, pp=args.pp,
                         microbatches=args.microbatches, schedule=args.schedule,
                         batch_inputs=args.batch_input, hardware=args.hardware)
        fn, peers = rp.fn, rp.peers
    else:
        fn = dtp(m.entry, dp=args.dp, tp=args.tp, pp=args.pp,
                 microbatches=args.microbatches, schedule=args.schedule,
                 self_contained=args.self_contained, batch_inputs=args.batch_input,
                 hardware=args.hardware)
    text = distir.dumps(fn)
    if args.output is None:
        sys.stdout.write(text)
        return 0
    with open(args.output, "w", encoding="utf-8") as f:
        f.write(text)
    weights = ""
    if fn.initializers:
        # Printed names are unique; bind each value to its parameter's printed name.
        from distir.ir.text import weights_path, write_weights

        printed = distir.parse(text, args.output).entry.params
        by_pos = {p.name: q.name or "" for p, q in zip(fn.params, printed)}
        wp = weights_path(args.output)
        write_weights(wp, {by_pos[k]: a for k, a in fn.initializers.items() if k in by_pos})
        weights = f"; weights of {len(fn.initializers)} parameters in {wp}"
    n_dev = args.dp * args.tp * args.pp
    functions = list(fn.reachable())
    written = fn.num_ops() + sum(len(c.ops) for c in functions)
    if args.one_replica and args.tp > 1:
        weights += f"; tensor-parallel rank 0 of {args.tp}" if peers > 1 else (
            f"; every tensor-parallel rank (the {args.tp} ranks do not run alike)")
    if args.one_replica and args.dp > 1 and rp.replicas == 1:
        weights += (f"; every one of the {args.dp} replicas (a collective over them has no "
                    "replica-0 form)")
    elif args.one_replica and args.dp > 1:
        from distir.analysis.replicas import replica_program

        read = replica_program(fn)
        meet = read is not None and read.replicas > 1
        weights += f"; replica 0 of {args.dp}" + ("" if meet else (
            " (an inference program: its replicas never meet, so the file holds no sign of "
            "the others and simulates as one replica)"))
    sys.stdout.write(f"wrote {args.output}: {n_dev} device{'s' * (n_dev != 1)}, "
                     f"{len(functions) + 1} functions, {written:,} ops "
                     f"({fn.num_ops(inline_calls=True):,} with calls inlined){weights}\n")
    return 0
