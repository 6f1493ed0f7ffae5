"""The float32 product fits against call G's products timed alone
(``call_g/product_probe.txt``; none of these shapes is in any fit): per row, measured /
predicted (us) for the forward product (``Hardware.matmul_time``) and both gradients'
(``layout_matmul_time``: ``matmul_nt``, ``matmul_tn``), then the median / p90 / worst
error over the 36.

    python grid_search/results/conv1d_tokens/check_products.py [--profile h200-sxm-graph]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from distir.analysis.hardware import load_hardware

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="h200-sxm-graph")
    hw = load_hardware(ap.parse_args().profile)
    rows = [line.split() for line in (HERE / "call_g/product_probe.txt").read_text().splitlines()
            if line.strip()[:1].isdigit()]
    print(f"# profile {hw.name}\n     M     K     N   forward         dy @ w^T        x^T @ dy")
    errs = []
    for m_, k_, n_, *times in rows:
        m, k, n = int(m_), int(k_), int(n_)
        preds = (hw.matmul_time(m, n, k, "Float32", 4),
                 hw.layout_matmul_time("matmul_nt", m, k, n, "Float32", 4),
                 hw.layout_matmul_time("matmul_tn", k, n, m, "Float32", 4))
        cells = []
        for t, p in zip(map(float, times), preds, strict=True):
            errs.append(p * 1e6 / t - 1)
            cells.append(f"{t:6.1f}/{p * 1e6:6.1f} {100 * errs[-1]:+5.1f}%")
        print(f"{m:6d} {k:5d} {n:5d}  " + "  ".join(cells))
    a = sorted(abs(e) for e in errs)
    print(f"{len(a)} products: median {100 * statistics.median(a):.1f}%, p90 "
          f"{100 * a[int(0.9 * len(a))]:.1f}%, worst {100 * a[-1]:.1f}%, median signed "
          f"{100 * statistics.median(errs):+.1f}%")


if __name__ == "__main__":
    main()
