"""Where a host-bound eager step's host time goes: each rank's host clock, step time and the
CPU time of every thread of its process, over the same timed steps.

A step run eagerly at a small batch is paced by its hosts (``calibration.bench_dispatch``).
This probe runs full-size programs, every rank timing ``--steps`` steps (barrier, the
program with ``CompiledProgram.run(host_clock=...)``, device synchronised) and reading,
before and after them, the user and system CPU time of each thread of its process
(``/proc/self/task/*/stat``, grouped by thread name). It writes one JSON line per
configuration and rank: the step times, the host's busy time per step (first op issued to
last), the per-op host medians summed, and each thread group's CPU seconds per step.
``--per-op CSV`` adds each op's median host time, and with ``--isolated N`` its host cost
measured again in N steps that synchronise the device after every op (so that nothing the
device or a peer does can hold the host back; ``distir.backend.lowering.isolated``): where
the two differ, the timed steps' host waited for its device. Run
under ``torchrun`` (one process per GPU); ``--env`` only labels the rows with the
environment the caller set::

    torchrun --nproc_per_node 4 -m calibration.host_threads --workload gpt2-350m-train \\
        --batch-size 8 --configs 4,1,1,1 2,2,1,1 -o threads.jsonl

Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import defaultdict
from typing import Any


def thread_cpu() -> dict[str, float]:
    """CPU seconds (user + system) of this process's threads, summed per thread name."""
    tick = os.sysconf("SC_CLK_TCK")
    out: defaultdict[str, float] = defaultdict(float)
    base = "/proc/self/task"
    for tid in os.listdir(base):
        try:
            with open(f"{base}/{tid}/stat", encoding="utf-8") as f:
                s = f.read()
        except OSError:  # the thread ended meanwhile
            continue
        name = s[s.index("(") + 1:s.rindex(")")]
        fields = s[s.rindex(")") + 2:].split()
        out[name] += (int(fields[11]) + int(fields[12])) / tick
    return dict(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m calibration.host_threads",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", default="gpt2-350m-train")
    p.add_argument("--dtype", default="Float16")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--configs", nargs="+", metavar="D,T,P,K", required=True)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--env", default="default", help="a label for the rows")
    p.add_argument("--backend", default="nccl", help="nccl (GPUs) or gloo (CPU, to try it)")
    p.add_argument("--per-op", metavar="CSV",
                   help="also write each op's median host time per rank: in the timed "
                   "steps (op start to next op start), and with --isolated")
    p.add_argument("--isolated", type=int, default=0, metavar="N",
                   help="with --per-op: N more steps synchronising the device after every "
                   "op, each op's kernel timed on the host (its own cost, device idle)")
    p.add_argument("-o", "--out", required=True, help="JSON lines, appended")
    args = p.parse_args(argv)
    configs = []
    for c in args.configs:
        parts = c.split(",")
        if len(parts) != 4 or not all(x.isdigit() and int(x) > 0 for x in parts):
            p.error(f"--configs: {c!r} is not D,T,P,K (four positive integers, e.g. 2,2,1,1)")
        configs.append(tuple(int(x) for x in parts))
    if args.steps < 1 or args.warmup < 0 or args.isolated < 0:
        p.error("--steps must be at least 1, --warmup and --isolated at least 0")
    if args.isolated and not args.per_op:
        p.error("--isolated N needs --per-op CSV, where its times are written")

    import torch
    import torch.distributed as dist

    from distir.backend.launch import TorchrunSession
    from distir.backend.lowering import isolated, synchronizer
    from distir.errors import DistIRError
    from distir.transforms import dtp
    from grid_search.models import workload

    sess = TorchrunSession(args.backend)
    runner, rank = sess.runner, sess.rank
    sync = synchronizer(runner.device)
    w = workload(args.workload, dtype=args.dtype)
    seq = w.analyze(args.batch_size)
    rows: list[dict[str, Any]] = []
    per_op_rows: list[dict[str, Any]] = []
    for dp, tp, pp, k in configs:
        label = f"D{dp} T{tp} P{pp} K{k}"
        try:
            fn = dtp(seq, dp=dp, tp=tp, pp=pp, microbatches=k,
                     schedule="1f1b" if w.training else "gpipe")
            task, compiled = sess.compile(fn)
        except DistIRError as e:
            if rank == 0:
                print(f"{label}: skipped ({e.message})", file=sys.stderr)
            continue
        inputs = runner.bind(task)
        with torch.inference_mode():
            for _ in range(args.warmup):
                compiled.run(inputs)
            sync()
            plain: list[float] = []
            for _ in range(args.steps):  # timed as the study times them
                dist.barrier()
                sync()
                t0 = time.perf_counter()
                compiled.run(inputs)
                sync()
                plain.append(time.perf_counter() - t0)
            cpu0, wall0 = thread_cpu(), time.perf_counter()
            steps: list[float] = []
            busy: list[float] = []
            per_op: list[list[float]] = [[] for _ in compiled.steps]
            for _ in range(args.steps):  # the same with the host's clock
                dist.barrier()
                sync()
                clock: list[float] = []
                t0 = time.perf_counter()
                compiled.run(inputs, host_clock=clock)
                sync()
                steps.append(time.perf_counter() - t0)
                busy.append(clock[-1] - clock[0])
                for i, (a, b) in enumerate(zip(clock, clock[1:])):
                    per_op[i].append(b - a)
            wall = time.perf_counter() - wall0
            cpu1 = thread_cpu()
            alone: list[list[float]] = [[] for _ in compiled.steps]
            iso: Any = None
            if args.per_op and args.isolated:
                iso, times = isolated(compiled, sync)
                for _ in range(args.isolated):
                    dist.barrier()
                    iso.run(inputs)
                    sync()
                    for i, t in enumerate(times):
                        alone[i].append(t)
            if args.per_op:
                for i, st in enumerate(compiled.steps):
                    per_op_rows.append({
                        "config": label, "rank": rank, "op": i, "op_type": st.op_type,
                        "comm": int(st.comm),
                        "host_s": f"{statistics.median(per_op[i]):.9f}",
                        "isolated_s": f"{statistics.median(alone[i]):.9f}" if alone[i]
                        else ""})
        threads = {n: round((cpu1.get(n, 0.0) - cpu0.get(n, 0.0)) / args.steps, 5)
                   for n in cpu1}
        rows.append({
            "workload": w.name, "batch": args.batch_size, "config": label, "env": args.env,
            "rank": rank, "ops": len(compiled.steps),
            "step_plain_s": [round(x, 6) for x in plain],
            "step_s": [round(x, 6) for x in steps],
            "host_busy_s": [round(x, 6) for x in busy],
            "host_median_sum_s": round(sum(statistics.median(x) for x in per_op), 6),
            "wall_per_step_s": round(wall / args.steps, 6),
            "thread_cpu_per_step_s": {n: v for n, v in sorted(threads.items()) if v > 0},
        })
        if rank == 0:
            print(f"{label} [{args.env}]: step {statistics.median(plain) * 1e3:.1f} ms, "
                  f"host busy {statistics.median(busy) * 1e3:.1f} ms", file=sys.stderr)
        del compiled, inputs, iso
    out = sess.gather(rows)
    if out is not None:
        with open(args.out, "a", encoding="utf-8") as f:
            for r in out:
                f.write(json.dumps(r) + "\n")
    if args.per_op:
        ops = sess.gather(per_op_rows)
        if ops is not None:
            import csv

            new = not os.path.exists(args.per_op)
            with open(args.per_op, "a", newline="", encoding="utf-8") as f:
                wr = csv.DictWriter(f, ["env", "config", "rank", "op", "op_type", "comm",
                                        "host_s", "isolated_s"])
                if new:
                    wr.writeheader()
                for r in ops:
                    wr.writerow({"env": args.env, **r})
    sess.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
