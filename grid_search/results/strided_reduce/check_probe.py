"""The column sums of ``reduce_probe.py`` (call A's ``reduce_probe.txt``) priced by a
profile's cost rule, as the simulator prices them (a transposed view's strides given as the
simulator's layout tracker finds them), beside their measured times:

    python check_probe.py call_a/reduce_probe.txt [--hardware h200-sxm-graph]

The ``after add`` column (the input just written by the step's previous kernel) is
compared too: a step runs a bias gradient after the op that wrote its ``dy``.
"""

from __future__ import annotations

import argparse
import statistics

from distir.analysis.cost import COST_RULES, load_cost_rules
from distir.analysis.hardware import load_hardware
from distir.analysis.layout import INPUT_STRIDES
from distir.ir.types import DType, TensorType


def price(hw, shape: tuple[int, ...], axes: tuple[int, ...],
          strides: tuple[int, ...] | None = None) -> float:
    x = TensorType(DType.Float32, shape, 0)
    y = TensorType(DType.Float32, tuple(d for i, d in enumerate(shape) if i not in axes), 0)
    attrs = {"keepdims": 0, **({INPUT_STRIDES: strides} if strides else {})}
    return COST_RULES.get("ReduceSum")("ReduceSum", (x, None), (y,), attrs, hw).seconds * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("probe")
    ap.add_argument("--hardware", "-H", default="h200-sxm-graph")
    a = ap.parse_args()
    load_cost_rules()
    hw = load_hardware(a.hardware)
    print(f"# profile {a.hardware}: priced / measured us, signed error")
    print("   N     L     C        contig        after add       transposed        per head")
    errs: dict[str, list[float]] = {"contig": [], "after add": [], "transposed": [],
                                    "per head": []}
    for line in open(a.probe):
        w = line.split()
        if not w or w[0].startswith("#") or not w[0].isdigit():
            continue
        n, tokens, c = map(int, w[:3])
        meas = [float(v) for v in w[3:7]]
        plain = price(hw, (n, tokens, c), (0, 1))
        trans = price(hw, (n, tokens, c), (0, 1), (c * tokens, 1, tokens))
        head = price(hw, (n, 12, tokens, 64), (0, 2)) if c == 768 else float("nan")
        cells = []
        for name, p, m in (("contig", plain, meas[0]), ("after add", plain, meas[1]),
                           ("transposed", trans, meas[2]), ("per head", head, meas[3])):
            if m == m:  # (not nan)
                errs[name].append(p / m - 1)
                cells.append(f"{p:5.1f}/{m:5.1f} {100 * (p / m - 1):+4.0f}%")
            else:
                cells.append(" " * 16)
        print(f"{n:4d} {tokens:5d} {c:5d}  " + "  ".join(cells))
    for name, e in errs.items():
        ab = sorted(abs(x) for x in e)
        print(f"{name}: {len(e)} rows, median |error| {100 * statistics.median(ab):.1f}%, "
              f"worst {100 * ab[-1]:.1f}%, median signed {100 * statistics.median(e):+.1f}%")


if __name__ == "__main__":
    main()
