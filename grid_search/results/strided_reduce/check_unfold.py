"""ConvBERT's unfold products (``unfold_probe.py``, call G's ``unfold_probe.txt``) priced
by a profile's cost rules, beside their measured times (us):

    python grid_search/results/strided_reduce/check_unfold.py [--hardware h200-sxm-graph]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from distir.analysis.cost import COST_RULES, load_cost_rules
from distir.analysis.hardware import load_hardware
from distir.ir.types import DType, TensorType

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hardware", "-H", default="h200-sxm-graph")
    hw_name = ap.parse_args().hardware
    load_cost_rules()
    hw = load_hardware(hw_name)
    print(f"# profile {hw_name}: priced / measured us")
    print(" batch   forward          MatMulGrad (both products)")
    for line in (HERE / "call_g" / "unfold_probe.txt").read_text().splitlines():
        w = line.split()
        if not w or not w[0].isdigit():
            continue
        b = int(w[0])
        f, d, g = (float(v) for v in w[4:7])
        a, x, dy = (TensorType(DType.Float32, s, 0) for s in ((b, 64, 9), (b, 9, 1), (b, 64, 1)))
        mm = COST_RULES.get("MatMul")("MatMul", (a, x), (dy,), {}, hw).seconds * 1e6
        grad = COST_RULES.get("MatMulGrad")("MatMulGrad", (a, x, dy), (a, x), {}, hw)
        print(f"{b:6d} {mm:7.1f} / {f:6.1f}   {grad.seconds * 1e6:7.1f} / {d + g:6.1f}")


if __name__ == "__main__":
    main()
