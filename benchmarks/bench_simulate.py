"""Benchmark of the simulator: simulated ops per second from 1,000 to 1,000,000 ops.

Not a test: it prints numbers (the DistIR paper's Figure 7). Run from the repository root::

    .venv/bin/python benchmarks/bench_simulate.py [--max-ops 1000000] [--repeats 3]
                                                  [--quick] [--csv OUT.csv]

Workloads, each a ladder of sizes:

- ``generated``: flat programs on 8 devices (per device a chain of MatMul, Relu and Add,
  a Send around the ring every few layers, an allreduce of all devices now and then);
- ``mlp``: the MLP training step (``distir.models.mlp``) under D/T/P with K microbatches
  (``distir.transforms.dtp``): the program as the transform writes it (stage functions
  called once per microbatch, so memoized calls do most of the work) and the same program
  with every call inlined (``flat``: every op interpreted);
- ``gpt2``: GPT-2 inference (``distir.models.gpt2``) likewise.

``ops`` counts the ops simulated, those inside calls included. Each simulation starts from
a fresh ``Simulator`` (cold rule caches). Times are the median over ``--repeats`` of wall
clock and of process CPU time (the machine may be shared: CPU time is the steadier one);
rates are ops / CPU second. The scaling exponent is the slope of log(time) against log(ops)
over the sizes of at least 10,000 ops (1.0 is linear).

Targets: >= 200,000 simulated ops/s on flat programs, linear scaling.
"""

from __future__ import annotations

import argparse
import csv
import gc
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from distir.analysis.simulator import simulate  # noqa: E402
from distir.ir import DType, FunctionBuilder, TensorType  # noqa: E402
from distir.ir.core import Function  # noqa: E402
from distir.ir.inline import inline_calls

TARGET_OPS_PER_S = 200_000.0


def generated(n_ops: int, devices: int = 8) -> Function:
    """A flat program of about ``n_ops`` ops on ``devices`` devices."""
    b = FunctionBuilder("main")
    t = TensorType(DType.Float16, (256, 1024), 0)
    xs = [b.param(f"x{d}", t.with_device(d)) for d in range(devices)]
    ws = [b.param(f"w{d}", TensorType(DType.Float16, (1024, 1024), d))
          for d in range(devices)]
    h = list(xs)
    count, layer = 0, 0
    while count < n_ops:
        for d in range(devices):
            a = b.op("MatMul", h[d], ws[d])
            r = b.op("Relu", a)
            h[d] = b.op("Add", r, xs[d])
            count += 3
        layer += 1
        if layer % 4 == 0:  # a Send around the ring, then back
            for d in range(devices):
                s = b.op("Send", h[d], device=(d + 1) % devices)
                h[(d + 1) % devices] = b.op("Add", s, h[(d + 1) % devices])
                count += 2
        if layer % 16 == 0:
            h = list(b.op("MPIAllreduce", *h, num_results=devices))
            count += 1
    return b.ret(*h)


def mlp_dtp(layers: int, dp: int, tp: int, pp: int, k: int) -> Function:
    from distir.models import mlp
    from distir.transforms import dtp

    f = mlp(batch_size=64 * dp * k, input_dim=1024, hidden_dim=4096, output_dim=1024,
            num_layers=layers, dtype=DType.Float16)
    return dtp(f, dp, tp, pp, k)


def gpt2_dtp(layers: int, dp: int, tp: int, pp: int, k: int) -> Function:
    from distir.models import gpt2
    from distir.transforms import dtp

    g = gpt2(n_layer=layers, d_model=1024, n_head=16, vocab_size=50257, seq_len=512,
             batch_size=4 * dp * k)
    return dtp(g, dp, tp, pp, k)


# (layers, dp, tp, pp, microbatches) ladders reaching about 10^3 .. 10^6 ops.
MLP_LADDER = [(8, 1, 2, 2, 4), (16, 2, 2, 2, 8), (32, 4, 2, 4, 16), (64, 4, 4, 4, 32),
              (96, 8, 4, 4, 48)]
GPT2_LADDER = [(4, 1, 2, 2, 2), (4, 2, 2, 2, 4), (12, 2, 4, 4, 8), (24, 4, 4, 4, 16),
               (48, 4, 4, 4, 32)]


def _time(fn: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Median wall-clock and CPU seconds of ``fn()`` over ``repeats`` runs."""
    wall, cpu = [], []
    for _ in range(repeats):
        gc.collect()
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu)


def _slope(points: list[tuple[int, float]]) -> float | None:
    pts = [(math.log(n), math.log(t)) for n, t in points if n >= 10_000 and t > 0]
    if len(pts) < 2:
        return None
    mx = statistics.mean(x for x, _ in pts)
    my = statistics.mean(y for _, y in pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--max-ops", type=int, default=1_000_000,
                    help="skip sizes above this many ops (default 1,000,000)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="sizes up to 100,000 ops, 1 repeat")
    ap.add_argument("--hardware", default="h100-sxm")
    ap.add_argument("--csv", default=None, help="also write the rows to this CSV file")
    args = ap.parse_args(argv)
    if args.quick:
        args.max_ops, args.repeats = min(args.max_ops, 100_000), 1
    print(f"# bench_simulate: {platform.python_implementation()} {platform.python_version()}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, "
          f"hardware profile {args.hardware}, median of {args.repeats}")
    head = (f"{'workload':<10} {'config':<16} {'ops':>10} {'statements':>10} "
            f"{'wall s':>9} {'cpu s':>9} {'ops/cpu s':>12}")
    print(head)
    print("-" * len(head))
    rows: list[dict[str, object]] = []
    series: dict[str, list[tuple[int, float]]] = {}

    def run(workload: str, config: str, fn: Function) -> None:
        n = fn.num_ops(inline_calls=True)
        wall, cpu = _time(lambda: simulate(fn, args.hardware), args.repeats)
        rate = n / cpu if cpu > 0 else float("inf")
        print(f"{workload:<10} {config:<16} {n:>10,} {len(fn.ops):>10,} {wall:>9.3f} "
              f"{cpu:>9.3f} {rate:>12,.0f}", flush=True)
        rows.append({"workload": workload, "config": config, "ops": n,
                     "statements": len(fn.ops), "wall_s": wall, "cpu_s": cpu,
                     "ops_per_cpu_s": rate})
        series.setdefault(workload, []).append((n, cpu))

    for n in (1_000, 10_000, 100_000, 1_000_000):
        if n <= args.max_ops:
            run("generated", f"{n:,} ops", generated(n))
    for name, ladder, build in (("mlp", MLP_LADDER, mlp_dtp), ("gpt2", GPT2_LADDER, gpt2_dtp)):
        for layers, dp, tp, pp, k in ladder:
            fn = build(layers, dp, tp, pp, k)
            if fn.num_ops(inline_calls=True) > 1.2 * args.max_ops:
                continue
            cfg = f"L{layers} {dp}/{tp}/{pp}/{k}"
            run(name, cfg, fn)
            run(name + "-flat", cfg, inline_calls(fn))
    print()
    for workload, pts in series.items():
        s = _slope(pts)
        flat = [r for r in rows if r["workload"] == workload]
        big = [r for r in flat if int(r["ops"]) >= 10_000]  # type: ignore[call-overload]
        rate = (sum(int(r["ops"]) for r in big) / sum(float(r["cpu_s"]) for r in big)  # type: ignore[call-overload,arg-type]
                if big else None)
        print(f"{workload:<10} scaling exponent "
              f"{'n/a' if s is None else f'{s:.2f}'}; ops/cpu s over sizes >= 10,000: "
              f"{'n/a' if rate is None else f'{rate:,.0f}'}"
              + ("" if rate is None or not workload.endswith(("flat", "generated")) else
                 f" (target {TARGET_OPS_PER_S:,.0f}: "
                 f"{'met' if rate >= TARGET_OPS_PER_S else 'NOT met'})"))
    if args.csv:
        with open(args.csv, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
