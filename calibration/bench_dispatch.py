"""Host dispatch: how long the backend's host thread spends issuing each op.

A GPU kernel cannot start before the host has issued it. When a rank's kernels are short
(small batches, data-parallel replicas of small shards, optimizer steps over many small
tensors), the host, not the GPU, sets the pace. This benchmark measures, per op type, the
host time between the start of one op of a rank's compiled program and the next
(``CompiledProgram.run(host_clock=...)``: Python's loop, the lowering's own work, PyTorch's
dispatch and the kernel launch; NCCL's host side for collectives), on programs small
enough that the GPU always keeps up, so the host never waits for a full launch queue.

Measure (one process per GPU; every rank runs every program)::

    torchrun --nproc_per_node 4 -m calibration.bench_dispatch measure -o dispatch.csv

The default programs are tiny training steps and inference programs of the builders
(``--workloads``), distributed every D/T/P/K way over the ranks (``--max-devices``).
``--steps`` host-timed steps follow ``--warmup`` untimed ones; the median per op is kept.

Fit (anywhere): the mean host time per op type (each op's own figure being its median over
the timed steps), and the mean over all ops as the default for types not measured, written
as a profile derived from another (``"base"``) that adds ``device.host_dispatch``
(seconds; see ``distir.analysis.hardware``)::

    python -m calibration.bench_dispatch fit dispatch.csv --profile h200-sxm -o PROFILE.json

Host dispatch depends on the host CPU, the Python and PyTorch versions and the load on the
machine: a profile's figures are those of the machine that measured them.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

DEFAULT_WORKLOADS = ("mlp-4-256", "gpt2-2-128-4-train", "gpt2-2-128-4")
DEFAULT_BATCH = 4
GPT2_SIZES = {"seq_len": 64, "vocab_size": 2048}
"""The default GPT-2 workloads' sequence and vocabulary: small, so that the GPU keeps up."""


def _host_times(compiled: Any, inputs: list[Any], steps: int, warmup: int,
                sync: Any) -> list[float]:
    """The median host time of each op over ``steps`` runs, after ``warmup`` untimed ones;
    ``sync`` waits for the device."""
    for _ in range(warmup):
        compiled.run(inputs)
    sync()
    per_op: list[list[float]] = [[] for _ in compiled.steps]
    for _ in range(steps):
        clock: list[float] = []
        compiled.run(inputs, host_clock=clock)
        sync()
        for i, (a, b) in enumerate(zip(clock, clock[1:])):
            per_op[i].append(b - a)
    return [statistics.median(x) for x in per_op]


def cmd_measure(args: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist

    from distir.backend.launch import TorchrunSession
    from distir.errors import DistIRError
    from distir.transforms import dtp
    from grid_search.models import workload
    from grid_search.space import enumerate_space, powers_of_two

    sess = TorchrunSession(args.backend)
    runner, rank, world = sess.runner, sess.rank, sess.world_size
    cuda = runner.device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    rows: list[dict[str, Any]] = []
    only = [tuple(int(x) for x in c.split(",")) for c in args.configs or []]
    for name in args.workloads:
        sizes = GPT2_SIZES if args.small and name.startswith("gpt2-") and \
            name.split("-")[1].isdigit() else {}
        w = workload(name, dtype=args.dtype, **sizes)
        seq = w.analyze(args.batch_size)
        space = [(c.dp, c.tp, c.pp, c.microbatches) for c in enumerate_space(
            w.name, powers_of_two(1, min(args.max_devices, world))[-1], [args.batch_size],
            fewer_devices=True, max_microbatches=args.max_microbatches)]
        for dp, tp, pp, k in only or space:
            label = f"{w.name} b{args.batch_size} D{dp} T{tp} P{pp} K{k}"
            try:
                fn = dtp(seq, dp=dp, tp=tp, pp=pp, microbatches=k,
                         schedule="1f1b" if w.training else "gpipe")
                task, compiled = sess.compile(fn)
            except DistIRError as e:
                if rank == 0:
                    print(f"{label}: skipped ({e.message})", file=sys.stderr)
                continue
            inputs = runner.bind(task)
            dist.barrier()
            with torch.inference_mode():
                times = _host_times(compiled, inputs, args.steps, args.warmup, sync)
            for i, (st, t) in enumerate(zip(compiled.steps, times)):
                rows.append({"program": label, "rank": rank, "op": i, "op_type": st.op_type,
                             "comm": int(st.comm), "host_s": f"{t:.9f}"})
            del compiled, inputs
            if rank == 0:
                print(f"{label}: {len(times)} ops, median "
                      f"{statistics.median(times) * 1e6:.1f} us", file=sys.stderr)
    out = sess.gather(rows)
    if out is not None:
        with open(args.out, "w", newline="", encoding="utf-8") as f:
            wr = csv.DictWriter(f, ["program", "rank", "op", "op_type", "comm", "host_s"])
            wr.writeheader()
            wr.writerows(out)
        print(f"wrote {args.out}: {len(out)} ops on {world} ranks, {runner.device_name}",
              file=sys.stderr)
    sess.close()
    return 0


def fit_table(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Mean host seconds per op type, and ``"*"``: the mean over every op measured. (The
    mean, not the median: the simulator adds these up over a step, and host times have a
    long right tail; medians under-count a step's host time by 7-12% on the 4 x H200
    machines measured.)"""
    by: defaultdict[str, list[float]] = defaultdict(list)
    for r in rows:
        # A rank program's Recv is the receiving half of the program's Send: the simulator
        # charges each device of a Send the Send's figure.
        t = "Send" if r["op_type"] == "Recv" else r["op_type"]
        by[t].append(float(r["host_s"]))
    table = {t: statistics.fmean(xs) for t, xs in sorted(by.items())}
    table["*"] = statistics.fmean(float(r["host_s"]) for r in rows)
    return table


def cmd_fit(args: argparse.Namespace) -> int:
    from distir.analysis.hardware import FORMAT, load_hardware
    from distir.errors import ConfigError

    try:
        opener = gzip.open if args.csv.endswith(".gz") else open
        with opener(args.csv, "rt", encoding="utf-8") as f:  # gzipped in results folders
            rows = list(csv.DictReader(f))
    except (OSError, EOFError, UnicodeDecodeError) as e:  # EOFError: a truncated .gz
        print(f"error: {args.csv}: {e.strerror if getattr(e, 'strerror', None) else e}",
              file=sys.stderr)
        return 2
    if not rows:
        print(f"error: {args.csv} holds no measurements", file=sys.stderr)
        return 2
    if not {"op_type", "host_s"} <= rows[0].keys():
        print(f"error: {args.csv}: not a bench_dispatch measurement file (it needs the "
              "columns op_type and host_s; write one with `measure`)", file=sys.stderr)
        return 2
    try:
        table = fit_table(rows)
    except ValueError as e:
        print(f"error: {args.csv}: a host_s is not a number ({e})", file=sys.stderr)
        return 2
    try:
        base = load_hardware(args.profile)  # (checks the name)
    except ConfigError as e:
        print(f"error: {e.message}", file=sys.stderr)
        return 2
    out = Path(args.out)
    ref = args.profile
    if ref.endswith((".json", ".json.gz")):  # a path: relative to the new profile's folder
        ref = os.path.relpath(Path(ref).resolve(), out.resolve().parent)
    d = {"format": FORMAT, "base": ref, "name": args.name or f"{base.name}-host",
         "description": f"{base.name} with the host dispatch measured by "
                        f"calibration.bench_dispatch ({args.csv})",
         "device": {"host_dispatch": {k: round(v, 9) for k, v in table.items()}}}
    out.write_text(json.dumps(d, indent=1) + "\n", encoding="utf-8")
    for k, v in table.items():
        print(f"{k:32s} {v * 1e6:8.1f} us")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m calibration.bench_dispatch",
                                description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="time each op's host dispatch (under torchrun)")
    m.add_argument("--workloads", nargs="+", default=list(DEFAULT_WORKLOADS))
    m.add_argument("--dtype", default="Float16")
    m.add_argument("--backend", default="nccl", help="nccl (GPUs) or gloo (CPU, to try it)")
    m.add_argument("--batch-size", type=int, default=DEFAULT_BATCH)
    m.add_argument("--max-devices", type=int, default=4)
    m.add_argument("--max-microbatches", type=int, default=4)
    m.add_argument("--configs", nargs="+", metavar="D,T,P,K",
                   help="only these configurations (default: every one that fits the ranks)")
    m.add_argument("--full-size", dest="small", action="store_false",
                   help="GPT-2 labels at the builder's sequence and vocabulary (default: "
                        f"{GPT2_SIZES})")
    m.add_argument("--steps", type=int, default=7)
    m.add_argument("--warmup", type=int, default=3)
    m.add_argument("-o", "--out", required=True)
    f = sub.add_parser("fit", help="per-op-type means into a profile's host_dispatch")
    f.add_argument("csv")
    f.add_argument("--profile", required=True,
                   help="the base profile (name or path) the new one adds host dispatch to")
    f.add_argument("--name", help="the new profile's name (default: BASE-host)")
    f.add_argument("-o", "--out", required=True)
    args = p.parse_args(argv)
    from distir.errors import DistIRError

    try:
        return cmd_measure(args) if args.cmd == "measure" else cmd_fit(args)
    except DistIRError as e:  # a bad workload name or option: one line, no traceback
        print(f"error: {e.message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
