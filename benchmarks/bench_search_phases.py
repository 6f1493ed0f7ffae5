"""Where a GPT-2 175B inference search spends its time, in one process (CPU seconds).

Default: every ``--every``-th configuration of the 1,050 of ``bench_grid_search.py``
(all 14 batch sizes), each built (once per batch size), transformed and simulated by one
shared simulator as a search worker does; CPU seconds of the build (import + analysis),
the transform and the simulation. ``--gc-pause`` pauses the cyclic garbage collector per
configuration as ``grid_search.search.evaluate`` does since issue 20.

``--warm``: four configurations at batch 1,024, each transformed and simulated five times
after a first simulation (the summaries of its stage and layer functions cached), with
the liveness pass of the entry function alone: the cost a configuration pays whatever
the caches hold. Best of five, CPU milliseconds.

    .venv/bin/python benchmarks/bench_search_phases.py [--every 7] [--gc-pause]
    .venv/bin/python benchmarks/bench_search_phases.py --warm
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

clock = time.process_time


def phases(every: int, gc_pause: bool, hardware: str) -> None:
    from distir._util import no_gc
    from distir.analysis.hardware import load_hardware
    from distir.analysis.simulator import Simulator
    from distir.errors import DistIRError
    from distir.transforms import dtp
    from distir.transforms.plan import Analysis
    from grid_search import enumerate_space, workload
    from grid_search.space import Config

    w = workload("gpt2-175b")
    configs = list(enumerate_space(w.name, 16, [2 ** k for k in range(7, 21)],
                                   schedules=["gpipe"]))[::every]
    sim = Simulator(load_hardware(hardware), share_equal_functions=True)
    models: dict[int, Analysis] = {}
    spent = [0.0, 0.0, 0.0]

    def one(c: Config) -> None:
        t0 = clock()
        an = models.get(c.batch_size)
        if an is None:
            an = models[c.batch_size] = w.analyze(c.batch_size)
        t1 = clock()
        try:
            fn = dtp(an, dp=c.dp, tp=c.tp, pp=c.pp, microbatches=c.microbatches,
                     schedule=c.schedule)
        except DistIRError:
            return
        t2 = clock()
        sim.simulate_function(fn, batch_size=c.batch_size)
        t3 = clock()
        spent[0] += t1 - t0
        spent[1] += t2 - t1
        spent[2] += t3 - t2

    t0 = clock()
    for c in configs:
        if gc_pause:
            with no_gc():
                one(c)
        else:
            one(c)
    b, d, s = spent
    print(f"{len(configs)} configurations: build {b:.2f}, transform {d:.2f}, simulate "
          f"{s:.2f}, total {clock() - t0:.2f} CPU s")


def warm(hardware: str) -> None:
    from distir.analysis.hardware import load_hardware
    from distir.analysis.memory import Memo, liveness
    from distir.analysis.simulator import Simulator
    from distir.transforms import dtp
    from grid_search import workload

    an = workload("gpt2-175b").analyze(1024)
    gc.disable()
    for cfg in [(1, 8, 2, 64), (2, 2, 4, 32), (1, 1, 16, 128), (16, 1, 1, 1)]:
        sim = Simulator(load_hardware(hardware), share_equal_functions=True)
        sim.simulate_function(dtp(an, *cfg, schedule="gpipe"))
        td, ts, tl = [], [], []
        for _ in range(5):
            t = clock()
            fn = dtp(an, *cfg, schedule="gpipe")
            td.append(clock() - t)
            t = clock()
            sim.simulate_function(fn)
            ts.append(clock() - t)
            memo = Memo()
            for op in fn.ops:
                if op.callee is not None:
                    liveness(op.callee, memo)
            t = clock()
            liveness(fn, memo)
            tl.append(clock() - t)
        args = sum(len(op.inputs) for op in fn.ops)
        print(f"D{cfg[0]}/T{cfg[1]}/P{cfg[2]}/K{cfg[3]}: {len(fn.ops):5d} statements, "
              f"{args:7,d} arguments; transform {min(td) * 1e3:6.1f}, simulate "
              f"{min(ts) * 1e3:6.1f} (of which liveness {min(tl) * 1e3:5.1f}) CPU ms")
    gc.enable()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--every", type=int, default=7)
    ap.add_argument("--gc-pause", action="store_true")
    ap.add_argument("--warm", action="store_true")
    ap.add_argument("--hardware", default="h200-sxm")
    args = ap.parse_args()
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, {args.hardware}, "
          f"load {os.getloadavg()[0]:.1f}")
    if args.warm:
        warm(args.hardware)
    else:
        phases(args.every, args.gc_pause, args.hardware)


if __name__ == "__main__":
    main()
