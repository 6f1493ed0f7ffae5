"""The fused Adam kernels of profiled steps, by the size of the update (see README.md).

    python adam_kernels.py PROGRAM.dir LABEL=TRACE.json [LABEL=TRACE.json ...]

Each trace is one rank's ``torch.profiler`` trace of a step of ``PROGRAM.dir`` (or of a
program with its updates in the same order: ``adam_programs.py``); the kernels of
``torch._fused_adam_`` are matched to the program's ``AdamOptimizer`` ops in order. Prints,
per number of elements, the median kernel time of each trace (us), and each trace's sum.
"""

from __future__ import annotations

import json
import statistics
import sys

from adam_programs import adam_types


def kernels(path: str) -> list[float]:
    with open(path, encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    ks = sorted((e for e in events if e.get("cat") == "kernel"
                 and "FusedAdamMathFunctor" in e.get("name", "")), key=lambda e: e["ts"])
    return [float(e["dur"]) for e in ks]


def main() -> None:
    sizes = [t.numel for t, _ in adam_types(sys.argv[1])]
    runs: dict[str, list[float]] = {}
    for arg in sys.argv[2:]:
        label, path = arg.split("=", 1)
        ks = kernels(path)
        if len(ks) != len(sizes):
            print(f"{label}: {len(ks)} kernels for {len(sizes)} updates; skipped")
            continue
        runs[label] = ks
    print(f"{'elements':>9} {'n':>3} " + " ".join(f"{lab:>12}" for lab in runs))
    for n in sorted(set(sizes)):
        idx = [i for i, s in enumerate(sizes) if s == n]
        print(f"{n:9d} {len(idx):3d} " + " ".join(
            f"{statistics.median(ks[i] for i in idx):12.1f}" for ks in runs.values()))
    print(f"{'sum':>9} {len(sizes):3d} " + " ".join(f"{sum(ks):12.1f}" for ks in runs.values()))


if __name__ == "__main__":
    main()
