"""Per-shape errors of profiles' float32 product fits on the held-out shapes (``split``
test) of this folder's measurements (``run_a``: off the grid; ``run_b``: the layouts from
256 rows, on the grid and off it, with the rows below 2,048 apart) and of the device-time
calibration's own (on the grid), per family: ``matmul``, ``matmul_nt``, ``matmul_tn``.

    git show e04b91e:calibration/profiles/h200-sxm-graph.json > /tmp/before.json
    python grid_search/results/offgrid_products/errors.py /tmp/before.json h200-sxm-graph
    python grid_search/results/offgrid_products/errors.py --h100 /tmp/h100-before.json \
        h100-sxm-graph        # the H100's files (h100/, ../h100x1_graph_profile/)
"""

from __future__ import annotations

import csv
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))

FILES = {  # card: (off the grid, layouts on the grid, layouts off it, the calibration's own)
    "H200": ([HERE / "h200-sxm-graph-offgrid.measurements.csv",
              HERE / "h200-sxm-graph-offgrid-s1.measurements.csv"],
             HERE / "h200-sxm-graph-layouts.measurements.csv",
             HERE / "h200-sxm-graph-layouts-offgrid.measurements.csv",
             ROOT / "grid_search/results/graph_heldout_4gpu/call_c/"
                    "h200-sxm-graph.measurements.csv"),
    "H100": ([HERE / "h100/h100-sxm-graph-offgrid.measurements.csv"],
             HERE / "h100/h100-sxm-graph-layouts.measurements.csv",
             HERE / "h100/h100-sxm-graph-layouts-offgrid.measurements.csv",
             ROOT / "grid_search/results/h100x1_graph_profile/"
                    "h100-sxm-graph-compute.measurements.csv"),
}


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8") as f:
        return [r for r in csv.DictReader(line for line in f if not line.startswith("#"))
                if r["split"] == "test" and r["dtype"] == "Float32"]


def _rows_below(r: dict[str, str], limit: int = 2048) -> bool:
    """A layout product of fewer than ``limit`` token rows (``matmul_tn``'s ``k``,
    ``matmul_nt``'s ``m``)."""
    return int(r["k"] if r["family"] == "matmul_tn" else r["m"]) < limit


def main() -> None:
    from distir.analysis.hardware import load_hardware

    args = sys.argv[1:]
    card = "H100" if args[:1] == ["--h100"] else "H200"
    off, layouts, layouts_off, on = FILES[card]
    profiles = {p: load_hardware(p) for p in args[card == "H100":]}
    small = [r for f in (layouts, layouts_off) for r in _rows(f) if _rows_below(r)]
    sets = {"off the grid": [r for f in off for r in _rows(f)], "on the grid": _rows(on),
            "layouts from 256 rows, on the grid": _rows(layouts),
            "layouts off the grid (run_b)": _rows(layouts_off),
            "layouts below 2,048 rows (run_b)": small}
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
                if not errs:
                    continue
                a = sorted(abs(e) for e in errs)
                print(f"| {name} | {fam} | {label} | {len(a)} | "
                      f"{100 * statistics.median(a):.1f}% | {100 * a[int(0.9 * len(a))]:.1f}% "
                      f"| {100 * a[-1]:.1f}% | {100 * statistics.median(errs):+.1f}% |")


if __name__ == "__main__":
    main()
