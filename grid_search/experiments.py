"""The DistIR paper's searches, as named experiments.

MLP 1B/17B/103B training and GPT-2 1.6B/13B/175B inference on 16 GPUs, each on the
paper's machine (``dgx2-v100``, 16 V100-32GB on NVSwitch) and on our calibrated profiles
(``h100-sxm``: compute calibrated on an H100; ``h200-sxm``: calibrated on 4 x H200)::

    python -m grid_search.experiments --list
    python -m grid_search.experiments mlp-1b-dgx2 [--workers 2] [-o out/experiments]
    python -m grid_search.experiments all

Each writes ``NAME.csv`` (one row per configuration), ``NAME.png`` (peak memory vs
throughput, the paper's Figures 5-6) and ``NAME.txt`` (the summary, the Table 2 layout),
and can be resumed (``--resume``).
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass

__all__ = ["Experiment", "EXPERIMENTS", "run_experiment"]


@dataclass(frozen=True)
class Experiment:
    name: str
    model: str
    hardware: str
    devices: int
    batch_sizes: tuple[int, ...]
    schedules: tuple[str, ...] = ("1f1b",)


_MLP_BATCH = (8192,)
_GPT2_BATCHES = tuple(2 ** k for k in range(7, 21))
EXPERIMENTS: dict[str, Experiment] = {}
for _hw, _tag in (("dgx2-v100", "dgx2"), ("h100-sxm", "h100"), ("h200-sxm", "h200")):
    for _m in ("mlp-1b", "mlp-17b", "mlp-103b"):
        EXPERIMENTS[f"{_m}-{_tag}"] = Experiment(f"{_m}-{_tag}", _m, _hw, 16, _MLP_BATCH)
    for _m in ("gpt2-1.6b", "gpt2-13b", "gpt2-175b"):
        EXPERIMENTS[f"{_m}-{_tag}"] = Experiment(f"{_m}-{_tag}", _m, _hw, 16, _GPT2_BATCHES,
                                                 ("gpipe",))


def run_experiment(exp: Experiment, out_dir: str, *, workers: int = 1,
                   resume: bool = False) -> str:
    """Run one experiment; return its summary text."""
    from grid_search import enumerate_space, run_search, summarize, workload
    from grid_search.report import plot_memory_throughput
    from grid_search.search import read_rows

    os.makedirs(out_dir, exist_ok=True)
    w = workload(exp.model)
    configs = list(enumerate_space(w.name, exp.devices, list(exp.batch_sizes),
                                   schedules=list(exp.schedules)))
    base = os.path.join(out_dir, exp.name)
    res = run_search(w, configs, hardware=exp.hardware, out=base + ".csv", workers=workers,
                     resume=resume)
    rows = read_rows(base + ".csv")
    text = summarize(rows, title=f"{exp.name}: {w.name} on {exp.devices} x {exp.hardware}, "
                     f"{len(rows)} configurations ({res.seconds:.1f} s)")
    with open(base + ".txt", "w", encoding="utf-8") as f:
        f.write(text + "\n")
    plot_memory_throughput(rows, base + ".png", title=f"{w.name}, {exp.devices} x {exp.hardware}")
    return text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m grid_search.experiments", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("names", nargs="*", help="experiments to run, or 'all'")
    p.add_argument("--list", action="store_true", help="list the experiments")
    p.add_argument("-o", "--out-dir", default="out/experiments")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--resume", action="store_true")
    args = p.parse_args(argv)
    if args.list or not args.names:
        for e in EXPERIMENTS.values():
            print(f"{e.name:<18} {e.model:<10} on {e.devices} x {e.hardware:<10} "
                  f"batch {', '.join(str(b) for b in e.batch_sizes[:3])}"
                  f"{', ...' if len(e.batch_sizes) > 3 else ''}")
        return 0
    names = list(EXPERIMENTS) if args.names == ["all"] else args.names
    unknown = [n for n in names if n not in EXPERIMENTS]
    if unknown:
        print(f"error: unknown experiment {', '.join(unknown)}; see --list", file=sys.stderr)
        return 1
    from distir.errors import DistIRError

    for n in names:
        try:
            print(run_experiment(EXPERIMENTS[n], args.out_dir, workers=args.workers,
                                 resume=args.resume))
        except DistIRError as e:
            print(f"{n}: {e}", file=sys.stderr)
            return 1
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
