"""The held-out study of ../passes_4gpu/ measured on 4 x H100 in two launches (see README.md),
against the H100's device-time profile ``h100-sxm-graph``: ``study compare`` of each launch
(written beside it), then, per study and batch size, the project's accuracy figures
(``grid_search.real.accuracy``) over: every row of each launch; the configurations of at most
2 GPUs; and the rows whose two measurements agree within ``--spread`` (default 2%).

    python grid_search/results/h100x4_passes/compare.py
    python grid_search/results/h100x4_passes/compare.py --dir ../h200x4_repeat \
        --profile h200-sxm-graph          # the same for another folder's two launches
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))  # grid_search, run as a script from anywhere
STUDIES = ("gpt2_12x2560_train_bf16_graph", "gpt2_12x2560_bf16_graph")
PROFILE = "h100-sxm-graph"


def _compare(study: str, launch: int, other: int, where: Path = HERE,
             profile: str = PROFILE) -> list[dict[str, str]]:
    d, o = where / f"launch_{launch}", where / f"launch_{other}"
    out = d / f"{study}_{profile}"
    subprocess.run([sys.executable, "-m", "grid_search.study", "compare",
                    str(d / f"{study}_measured.csv"), "--repeat", str(o / f"{study}_measured.csv"),
                    "--dtype", "BFloat16", "--hardware", profile, "-o", str(out)],
                   check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    with open(f"{out}.csv", encoding="utf-8") as f:
        return [r for r in csv.DictReader(f) if r["measured_status"] == "ok" and r["latency_s"]]


def _line(label: str, rows: list[dict[str, str]]) -> str:
    from grid_search.real import accuracy

    if len(rows) < 2:
        return f"| {label} | {len(rows)} | | | | | |"
    a = accuracy(rows)
    return (f"| {label} | {int(a['n'])} | {a['spearman']:.3f} | {a['kendall']:.3f} | "
            f"{a['median_latency_error'] * 100:.1f}% / {a['p90_latency_error'] * 100:.1f}% / "
            f"{a['worst_latency_error'] * 100:.1f}% | "
            f"{a['median_signed_latency_error'] * 100:+.1f}% | {a['top1_regret'] * 100:.1f}% |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spread", type=float, default=0.02)
    ap.add_argument("--dir", type=Path, default=HERE, help="the folder of launch_1, launch_2")
    ap.add_argument("--profile", default=PROFILE)
    a = ap.parse_args()
    where = a.dir if a.dir.is_absolute() else (HERE / a.dir).resolve()
    print("| study, batch, rows | n | Spearman | Kendall | latency error median / p90 / worst "
          "| median signed | top-1 regret |")
    print("|---|---|---|---|---|---|---|")
    for study in STUDIES:
        launches = {n: _compare(study, n, 3 - n, where, a.profile) for n in (1, 2)}
        for b in sorted({int(r["batch_size"]) for r in launches[2]}):
            for n, rows in launches.items():
                rows = [r for r in rows if int(r["batch_size"]) == b]
                print(_line(f"{study}, batch {b}, launch {n}, all", rows))
                print(_line(f"{study}, batch {b}, launch {n}, <= 2 GPUs",
                            [r for r in rows if int(r["devices"]) <= 2]))
                print(_line(f"{study}, batch {b}, launch {n}, repeated within "
                            f"{a.spread:.0%}", [r for r in rows
                                                if float(r["measured_spread"]) <= a.spread]))


if __name__ == "__main__":
    main()
