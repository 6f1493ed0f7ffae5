"""Benchmark of the GPT-2 training presets: building the step, typing it, simulating it.

Not a test: it prints numbers. Run from the repository root::

    .venv/bin/python benchmarks/bench_training_presets.py [--preset gpt2-1.6b-train ...]
        [--batch-size 8] [--repeats 3] [--hardware h100-sxm]

For each preset (default: ``gpt2-1.6b-train``) it reports the median over ``--repeats`` runs
of

- forward: ``GPT2Config.build()``, the inference graph imported into DistIR;
- step: ``distir.transforms.training_step`` of it (cross-entropy, Adam, every weight);
- types: ``distir.infer_types`` of the step;
- simulate: ``distir.simulate`` of the step on one device of ``--hardware``;

and the total of the first run (cold: it also loads the rule modules), with the ops of the
step and its simulated time and peak memory. Target (issue 15): the 1.6B step types and
simulates in under 5 s, building included.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import onnx  # noqa: E402, F401  (imported before the timings start)
from _machine import machine_line  # noqa: E402

import distir  # noqa: E402
from distir.models import presets  # noqa: E402
from distir.transforms import training_step  # noqa: E402

TARGET_SECONDS = 5.0


def _once(name: str, batch: int, hardware: str) -> tuple[list[float], distir.Function, object]:
    cfg = presets.get(name, batch_size=batch)
    assert isinstance(cfg, presets.TrainingConfig)
    t0 = time.perf_counter()
    fwd = cfg.forward.build()
    t1 = time.perf_counter()
    step = training_step(fwd, loss=cfg.loss, optimizer=cfg.optimizer, lr=cfg.lr,
                         checkpoint=cfg.checkpoint, wrt=list(cfg.weight_shapes()))
    t2 = time.perf_counter()
    distir.infer_types(step)
    t3 = time.perf_counter()
    sim = distir.simulate(step, hardware=hardware)
    t4 = time.perf_counter()
    return [t1 - t0, t2 - t1, t3 - t2, t4 - t3], step, sim


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", nargs="+", default=["gpt2-1.6b-train"],
                    choices=presets.names(training=True))
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--hardware", default="h100-sxm")
    args = ap.parse_args()
    print(f"# {machine_line()}, load average {os.getloadavg()[0]:.1f}")
    print(f"{'preset':18s} {'forward':>8s} {'step':>8s} {'types':>8s} {'simulate':>9s} "
          f"{'total':>7s} {'cold':>7s}  ops    simulated")
    for name in args.preset:
        runs = []
        step: distir.Function | None = None
        sim: object = None
        for _ in range(max(1, args.repeats)):
            times, step, sim = _once(name, args.batch_size, args.hardware)
            runs.append(times)
        med = [statistics.median(r[i] for r in runs) for i in range(4)]
        total = sum(med)
        assert step is not None
        lat = getattr(sim, "latency_s", float("nan"))
        peak = max(getattr(sim, "peak_memory_bytes", {0: 0}).values()) / 2**30
        flag = "" if total < TARGET_SECONDS else f"  (over the {TARGET_SECONDS:.0f} s target)"
        print(f"{name:18s} {med[0]:7.2f}s {med[1]:7.2f}s {med[2]:7.2f}s {med[3]:8.2f}s "
              f"{total:6.2f}s {sum(runs[0]):6.2f}s  {len(step.ops):5d}  {lat:.3f} s, "
              f"{peak:.1f} GiB peak{flag}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
