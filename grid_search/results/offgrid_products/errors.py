"""Per-shape errors of two profiles' float32 product fits on the held-out shapes (``split``
test) of this folder's off-grid measurements and of the device-time calibration's own
(on the grid), per family: ``matmul``, ``matmul_nt``, ``matmul_tn``.

    git show e04b91e:calibration/profiles/h200-sxm-graph.json > /tmp/before.json
    python grid_search/results/offgrid_products/errors.py /tmp/before.json h200-sxm-graph
"""

from __future__ import annotations

import csv
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))

OFF = sorted(HERE.glob("*.measurements.csv"))
ON = ROOT / "grid_search/results/graph_heldout_4gpu/call_c/h200-sxm-graph.measurements.csv"


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8") as f:
        return [r for r in csv.DictReader(line for line in f if not line.startswith("#"))
                if r["split"] == "test" and r["dtype"] == "Float32"]


def main() -> None:
    from distir.analysis.hardware import load_hardware

    profiles = {p: load_hardware(p) for p in sys.argv[1:]}
    sets = {"off the grid": [r for f in OFF for r in _rows(f)], "on the grid": _rows(ON)}
    print("| shapes | family | profile | n | median | p90 | worst | median signed |")
    print("|---|---|---|---|---|---|---|---|")
    for name, rows in sets.items():
        for fam in ("matmul", "matmul_nt", "matmul_tn"):
            for label, hw in profiles.items():
                errs = []
                for r in rows:
                    if r["family"] != fam:
                        continue
                    m, n, k = int(r["m"]), int(r["n"]), int(r["k"])
                    p = (hw.matmul_time(m, n, k, "Float32", 4) if fam == "matmul" else
                         hw.layout_matmul_time(fam, m, n, k, "Float32", 4))
                    errs.append(p / float(r["seconds"]) - 1)
                a = sorted(abs(e) for e in errs)
                print(f"| {name} | {fam} | {label} | {len(a)} | "
                      f"{100 * statistics.median(a):.1f}% | {100 * a[int(0.9 * len(a))]:.1f}% "
                      f"| {100 * a[-1]:.1f}% | {100 * statistics.median(errs):+.1f}% |")


if __name__ == "__main__":
    main()
