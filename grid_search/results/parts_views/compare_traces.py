"""The liveness model against traced bytes, per model, for traces of two checkouts
(``cpu_traces.sh ROOT old`` and ``ROOT new``): the model less the measured bytes at the
measured peak and their extremes over every op (during and after each), in MiB.

    python compare_traces.py DIR/old DIR/new hiera deberta ...
"""

from __future__ import annotations

import os
import sys

import pandas as pd

MIB = 2**20


def figures(path: str) -> tuple[float, float, float, float] | None:
    if not os.path.exists(path):
        return None
    d = pd.read_csv(path)
    after = (d.model_after - d.measured_after) / MIB
    during = (d.model_during - d.measured_during) / MIB
    return ((d.measured_during.max() - d.measured_after.iloc[0]) / MIB,
            (d.model_during.max() - d.measured_during.max()) / MIB,
            min(after.min(), during.min()), max(after.max(), during.max()))


def main() -> None:
    old, new, *names = sys.argv[1:]
    print(f"{'model':12} {'growth MiB':>10} | {'old: peak':>10} {'min':>8} {'max':>8} | "
          f"{'new: peak':>10} {'min':>8} {'max':>8}")
    for n in names:
        a, b = figures(f"{old}/{n}.csv"), figures(f"{new}/{n}.csv")
        grow = (a or b or (float("nan"),))[0]
        row = f"{n:12} {grow:10.1f} |"
        for f in (a, b):
            row += "          - |" if f is None else \
                f" {f[1]:+10.1f} {f[2]:+8.1f} {f[3]:+8.1f} |"
        print(row)


if __name__ == "__main__":
    main()
