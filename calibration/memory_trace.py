"""Memory per op, measured beside the simulator's liveness: where a run holds more.

The out-of-memory filter trusts the simulator's liveness (``distir.analysis.memory``): a
value lives from the op that defines it to its last use, and occupies its type's bytes.
A real run may hold more: storage that a view keeps alive past its base's last use,
buffers a kernel allocates and frees within itself, anything the backend keeps that the
program does not name. This tool runs one configuration of a workload for one step under
``torchrun`` and records, per op of each rank's program, the bytes allocated during the op
and after its dead inputs are freed (``CompiledProgram.run(memory_clock=...)``: the CUDA
caching allocator's counts on a GPU; on the CPU, the bytes of the distinct storages the
live tensors hold), beside the liveness model's bytes for the same op of the same rank
program. ``report`` then names the ops where the run's excess over the model grows most::

    torchrun --nproc_per_node 2 -m calibration.memory_trace measure --model gpt2-350m-train \\
        --dtype Float16 --batch-size 140 --config 1,1,2,2 --hardware h200-sxm -o trace.csv
    python -m calibration.memory_trace report trace.csv
    torchrun --nproc_per_node 1 -m calibration.memory_trace measure --model MODEL.onnx \\
        --dim batch=64 --train --loss cross_entropy --optimizer adam --batch-size 64 \\
        --config 1,1,1,1 -o trace.csv             # a model file, as its search was given

A step that runs out of memory records the ops before the one that failed (``status``
``oom: ...`` on that rank's rows, with the allocator's state then), so the excess just
before the failure is there to read. The GPU's
figures count what the allocator hands out, not what it reserves: fragmentation and what
lies outside the allocator (CUDA context, communicators) are not in them.
"""

from __future__ import annotations

import argparse
import csv
import sys
from typing import Any

COLUMNS = ["rank", "op", "op_type", "outputs", "model_during", "model_after",
           "measured_during", "measured_after", "reserved_after", "status"]


def model_bytes(fn: Any, hardware: str = "h100-sxm") -> list[tuple[int, int]]:
    """Per op of a flat rank program, the simulator's liveness model's bytes ``(during the
    op, after it)``: the parameters, the values defined and not yet past their last use,
    each its type's bytes, views as their storage (``memory.liveness`` with ``views``, its
    views or copies by types and strides as the simulator finds them on ``hardware``; in a
    program the simulator does not run alone, one of a pipeline's ranks, as the liveness
    guesses them from the declared types), and during the op its kernel's temporary
    (``memory.transient_bytes``) and a reduction's staging buffer
    (``memory.reduce_staging_bytes``, of a contiguous input, its axes a ``Constant``):
    what ``Simulator`` counts for that device."""
    from distir.analysis.hardware import load_hardware
    from distir.analysis.memory import ALIASED, liveness, staged_in_program, transient_bytes
    from distir.analysis.simulator import Simulator
    from distir.errors import DistIRError

    sms = load_hardware(hardware).sm_count
    consts = {op.outputs[0]: op for op in fn.ops
              if op.op_type == "Constant" and len(op.outputs) == 1}
    sim = Simulator(hardware, fallback=True)
    try:
        sim.simulate_function(fn)
        flips = sim.entry_flips
    except DistIRError:  # (a rank's program of transfers: the guesses, by declared types)
        flips = frozenset()
    fl = liveness(fn, entry=True, views=True, flips=flips)
    roots = fl.root_frees or {}

    def size(v: Any) -> int:
        return 0 if v is None or v.type is None else v.type.size_bytes

    live = sum(map(size, fn.params))
    out = []
    for op in fn.ops:
        if op.callee is not None:
            raise ValueError(f"@{fn.name} calls @{op.callee.name}: give a rank program "
                             "(flat)")
        sig, free_in, _, free_out, _, _ = fl.ops[op]
        if sig[3:4] != (ALIASED,):  # (a view holds its storage's bytes, counted already)
            live += sum(map(size, op.outputs))
        during = live + transient_bytes(op.op_type, tuple(
            None if v is None else v.type for v in op.inputs)) + staged_in_program(op, consts, sms)
        live -= sum(size(op.inputs[i]) for i in free_in)
        live -= sum(size(op.outputs[i]) for i in free_out)
        live -= sum(size(root) for _, root, pi in roots.get(op, ()) if pi < 0)
        out.append((during, live))
    return out


def cmd_measure(args: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist

    from distir.backend.launch import TorchrunSession
    from distir.backend.lowering import is_oom
    from distir.transforms import dtp
    from grid_search.study import workload_from_args

    sess = TorchrunSession(args.backend)
    runner, rank, world = sess.runner, sess.rank, sess.world_size
    w = workload_from_args(args)
    dp, tp, pp, k = (int(x) for x in args.config.split(","))
    # (on the model's own weights: an index a model file binds, such as BEiT's relative
    # positions, drawn at random would scatter out of bounds)
    seq = w.analyze(args.batch_size, hardware=args.hardware, weights=True)
    fn = dtp(seq, dp=dp, tp=tp, pp=pp, microbatches=k,
             schedule=args.schedule or ("1f1b" if w.training else "gpipe"))
    task, compiled = sess.compile(fn, memory_limit=args.memory_limit)
    model = model_bytes(task.program.fn, args.hardware)
    measured: list[tuple[int, int, int]] = []
    status = "ok"
    if args.snapshot and runner.device.type == "cuda":  # every allocation, with its address
        torch.cuda.memory._record_memory_history(max_entries=2_000_000)
    dist.barrier()
    try:
        inputs = runner.bind(task)
        with torch.inference_mode():
            compiled.run(inputs, memory_clock=measured)
    except Exception as e:  # noqa: BLE001 - recorded, then reported by rank 0
        if not is_oom(e):
            raise
        status = f"oom: {_oom_state(runner.device, e)}"
    if args.snapshot and runner.device.type == "cuda":
        import os

        os.makedirs(args.snapshot, exist_ok=True)
        torch.cuda.memory._dump_snapshot(os.path.join(args.snapshot, f"rank{rank}.pickle"))
        torch.cuda.memory._record_memory_history(enabled=None)
    ops = task.program.fn.ops
    rows = [{"rank": rank, "op": i, "op_type": ops[i].op_type,
             "outputs": " ".join(str(v.name) for v in ops[i].outputs),
             "model_during": m[0], "model_after": m[1], "measured_during": x[0],
             "measured_after": x[1], "reserved_after": x[2], "status": status}
            for i, (m, x) in enumerate(zip(model, measured))]
    out = sess.gather(rows)
    if out is not None:
        with open(args.out, "w", newline="", encoding="utf-8") as f:
            wr = csv.DictWriter(f, COLUMNS)
            wr.writeheader()
            wr.writerows(out)
        print(f"wrote {args.out}: {len(out)} ops on {world} ranks, {runner.device_name}",
              file=sys.stderr)
        print(report(out, args.top))
    sess.close()
    return 0


def _oom_state(device: Any, e: BaseException) -> str:
    """The allocator's state when an op ran out of memory: what it had allocated and
    reserved, and what the device had free outside it."""
    import torch

    if device.type != "cuda":
        return str(e).splitlines()[0] if str(e) else type(e).__name__
    gib = 2.0 ** 30
    free, total = torch.cuda.mem_get_info(device)
    alloc = torch.cuda.memory_allocated(device)
    res = torch.cuda.memory_reserved(device)
    return (f"allocated {alloc / gib:.2f} GiB, reserved {res / gib:.2f} GiB, device free "
            f"{free / gib:.2f} of {total / gib:.2f} GiB (outside the allocator "
            f"{(total - free - res) / gib:.2f} GiB)")


def report(rows: list[dict[str, Any]], top: int = 8) -> str:
    """Per rank: the peaks, the excess of the run over the model at the end (or at the
    failure), and the ``top`` ops where that excess grows most (what the run keeps that the
    model frees, or allocates that the model does not) and where an op's own transients
    (its peak over the model's) are largest."""
    gib = 2.0 ** 30
    lines = []
    by_rank: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        by_rank.setdefault(int(r["rank"]), []).append(r)
    for rank, rs in sorted(by_rank.items()):
        rs.sort(key=lambda r: int(r["op"]))
        if not rs:
            continue
        md = [int(r["model_during"]) for r in rs]
        ma = [int(r["model_after"]) for r in rs]
        xd = [int(r["measured_during"]) for r in rs]
        xa = [int(r["measured_after"]) for r in rs]
        status = rs[-1]["status"]
        last = f"op {rs[-1]['op']} ({rs[-1]['op_type']})"
        oom = f" before running out of memory ({status[5:]})" if status.startswith("oom") \
            else ""
        res = [int(r["reserved_after"]) for r in rs]
        lines.append(
            f"rank {rank}: {len(rs)} ops{oom}; "
            f"peak measured {max(xd) / gib:.2f} GiB, model {max(md) / gib:.2f} GiB; after "
            f"{last}: measured {xa[-1] / gib:.2f} GiB, model {ma[-1] / gib:.2f} GiB "
            f"(excess {(xa[-1] - ma[-1]) / gib:+.2f} GiB); reserved at most "
            f"{max(res) / gib:.2f} GiB, {res[-1] / gib:.2f} GiB at the end")
        excess = [x - m for x, m in zip(xa, ma)]
        grow = sorted(range(len(rs)), key=lambda i: excess[i] - (excess[i - 1] if i else 0),
                      reverse=True)[:top]
        lines.append("  where the excess grows most (op, type, its outputs: growth, excess "
                     "after):")
        for i in sorted(grow):
            d = excess[i] - (excess[i - 1] if i else 0)
            if d <= 0:
                continue
            lines.append(f"    {rs[i]['op']:>6} {rs[i]['op_type']:<22} {rs[i]['outputs'][:40]:<40} "
                         f"{d / gib:+8.3f} {excess[i] / gib:+8.3f} GiB")
        trans = sorted(range(len(rs)), key=lambda i: xd[i] - xa[i - 1] - (md[i] - ma[i - 1])
                       if i else 0, reverse=True)[:top]
        lines.append("  largest transients beyond the model (the op's peak over what it "
                     "allocated before, less the model's):")
        for i in sorted(trans):
            if not i:
                continue
            t = xd[i] - xa[i - 1] - (md[i] - ma[i - 1])
            if t <= 0:
                continue
            lines.append(f"    {rs[i]['op']:>6} {rs[i]['op_type']:<22} {rs[i]['outputs'][:40]:<40} "
                         f"{t / gib:+8.3f} GiB")
    return "\n".join(lines)


def cmd_report(args: argparse.Namespace) -> int:
    try:
        with open(args.csv, encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        print(f"error: {args.csv}: {e.strerror}", file=sys.stderr)
        return 2
    if not rows or not set(COLUMNS) <= rows[0].keys():
        print(f"error: {args.csv}: not a memory_trace file (it needs the columns "
              f"{', '.join(COLUMNS)}; write one with `measure`)", file=sys.stderr)
        return 2
    print(report(rows, args.top))
    return 0


def main(argv: list[str] | None = None) -> int:
    from grid_search.study import add_workload_arguments

    p = argparse.ArgumentParser(prog="python -m calibration.memory_trace",
                                description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="one step's memory per op, per rank (under torchrun)")
    add_workload_arguments(m)
    m.add_argument("--batch-size", type=int, required=True)
    m.add_argument("--config", required=True, metavar="D,T,P,K")
    m.add_argument("--schedule", choices=("gpipe", "1f1b"), default=None,
                   help="the pipeline schedule (default: 1f1b for a training step, gpipe "
                   "otherwise)")
    m.add_argument("--hardware", default="h100-sxm",
                   help="the profile weighing pipeline stages balanced by cost (the one "
                   "simulated)")
    m.add_argument("--memory-limit", type=int, default=None, metavar="BYTES",
                   help="cap the allocator (torch.cuda.set_per_process_memory_fraction)")
    m.add_argument("--backend", default=None, help="nccl (GPUs) or gloo (CPU)")
    m.add_argument("--top", type=int, default=8)
    m.add_argument("--snapshot", metavar="DIR", default=None,
                   help="on a GPU, also write each rank's allocator history "
                   "(DIR/rank<r>.pickle, torch.cuda.memory._dump_snapshot: every "
                   "allocation and free with its address; pytorch.org/memory_viz reads it)")
    m.add_argument("-o", "--out", required=True)
    m.set_defaults(func=cmd_measure)
    r = sub.add_parser("report", help="where a measured trace exceeds the model")
    r.add_argument("csv")
    r.add_argument("--top", type=int, default=8)
    r.set_defaults(func=cmd_report)
    args = p.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
