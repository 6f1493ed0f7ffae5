"""Predicted vs measured for this folder's held-out two-GPU searches (README.md).

    python grid_search/results/heldout_2gpu/compare.py WORK [--profile P]

Unpacks ``call_a/rows.tgz`` and ``call_a/skel.tgz`` under WORK, fills each skeleton into
WORK/full/NAME.onnx once (the device's own export, its emptied weights given seeded
values: ``python -m grid_search.skeleton``), runs ``python -m grid_search.study compare``
on each search's rows (every row's program checked against the fingerprint recorded when
it was measured), and prints, per model and batch size, the project's accuracy figures
(``grid_search.real.accuracy``: Spearman, Kendall's tau, latency error median / p90 /
worst, signed median, top-1 regret, memory error), then the figures over the searches.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import subprocess
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))

OPTIONS = ["--dim", "seq=512", "--train", "--loss", "mse", "--optimizer", "adam"]
SEARCHES = [  # (what, model, batch size): as run_a.sh searched them
    ("StableLM 1024 x 12", "stablelm", 8), ("GPT-NeoX (Pythia-160M)", "gpt_neox", 8),
    ("Qwen2 896 x 12 (GQA)", "qwen2", 8), ("OLMo 1024 x 12", "olmo", 8),
    ("GPT-J 1024 x 12", "gptj", 8), ("StableLM 1024 x 12", "stablelm", 16),
    ("Qwen2 896 x 12 (GQA)", "qwen2", 16),
]


def main() -> None:
    from grid_search.real import accuracy

    ap = argparse.ArgumentParser()
    ap.add_argument("work", type=Path)
    ap.add_argument("--profile", default="h200-sxm-graph")
    a = ap.parse_args()
    work = a.work.resolve()
    for what in ("rows", "skel"):
        with tarfile.open(HERE / "call_a" / f"{what}.tgz") as t:
            t.extractall(work, filter="data")
    (work / "full").mkdir(exist_ok=True)
    (work / "reports").mkdir(exist_ok=True)
    print(f"held-out searches on 2 x H200, float32 training (Adam), replayed; simulated on "
          f"{a.profile}")
    print(f"{'model':24} {'batch':>5} {'rows':>4} {'Spearman':>8} {'Kendall':>7} "
          f"{'|error| median / p90 / worst':>29} {'signed':>7} {'regret':>7} "
          f"{'memory median / worst':>22}")
    figures: dict[str, list[float]] = {"spearman": [], "median": [], "p90": [], "regret": []}
    for what, name, batch in SEARCHES:
        model = work / "full" / f"{name}.onnx"
        if not model.exists():
            subprocess.run([sys.executable, "-m", "grid_search.skeleton", "fill",
                            str(work / "skel" / f"{name}.skel.onnx"), str(model)], cwd=ROOT,
                           check=True, stdout=subprocess.DEVNULL)
        out = work / "reports" / f"{name}_b{batch}"
        subprocess.run([sys.executable, "-m", "grid_search.study", "compare",
                        str(work / "rows" / f"{name}_b{batch}.csv"), "--model", str(model),
                        *OPTIONS, "--hardware", a.profile, "-o", str(out)], cwd=ROOT,
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rows = list(csv.DictReader(open(f"{out}.csv")))
        acc = accuracy(rows)
        figures["spearman"].append(acc["spearman"])
        figures["median"].append(acc["median_latency_error"])
        figures["p90"].append(acc["p90_latency_error"])
        figures["regret"].append(acc["top1_regret"])
        print(f"{what:24} {batch:>5} {int(acc['n']):>4} {acc['spearman']:8.3f} "
              f"{acc['kendall']:7.3f} {100 * acc['median_latency_error']:10.1f}% / "
              f"{100 * acc['p90_latency_error']:4.1f}% / {100 * acc['worst_latency_error']:4.1f}% "
              f"{100 * acc['median_signed_latency_error']:+6.1f}% {100 * acc['top1_regret']:6.1f}% "
              f"{100 * acc['median_memory_error']:12.1f}% / "
              f"{100 * acc['worst_memory_error']:4.1f}%")
    n = len(SEARCHES)
    print()
    good = sum(x >= 0.95 for x in figures["spearman"])
    print(f"over the {n} searches: Spearman >= 0.95 in {good} (median "
          f"{statistics.median(figures['spearman']):.3f}, worst "
          f"{min(figures['spearman']):.3f}); median |error| <= 5% in "
          f"{sum(x <= 0.05 for x in figures['median'])}; p90 <= 15% in "
          f"{sum(x <= 0.15 for x in figures['p90'])}; regret <= 3% in "
          f"{sum(x <= 0.03 for x in figures['regret'])} (worst "
          f"{100 * max(figures['regret']):.1f}%)")


if __name__ == "__main__":
    main()
