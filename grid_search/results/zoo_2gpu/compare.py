"""Predicted vs measured for the studies of this folder (see README.md): per model and batch
size, the project's accuracy figures (``grid_search.real.accuracy``) over every measured row,
then over the 1F1B rows alone (the default search's schedule: GPipe and 1F1B steps of one
configuration differ by 0-1.5%, so their order is a near tie the measurement decides).

    python grid_search/results/zoo_2gpu/compare.py [--rows]

The predictions are the ones ``distir grid-search --run-top`` wrote beside each measurement
(``h200-sxm-graph``, at the commit in each call's log; no cost-model change since).
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))  # grid_search, run as a script from anywhere

STUDIES = [  # (model, held out?, CSVs)
    ("HF GPT-2 12 x 768 (dynamo)", True, ["call_b/hf_gpt2_b8_graph.csv",
                                           "call_a/hf_gpt2_b16_graph.csv"]),
    ("HF LLaMA 8 x 1024 (dynamo)", True, ["call_c/sealed/llama_b8_graph.csv",
                                          "call_c/sealed/llama_b16_graph.csv"]),
    ("HF ViT 12 x 768 (torchscript)", True, ["call_c/sealed/vit_b32_graph.csv",
                                             "call_c/sealed/vit_b64_graph.csv"]),
    ("HF BERT 12 x 768 (torchscript)", False, ["call_b/bert_b16_graph.csv",
                                               "call_a/bert_b32_graph.csv"]),
    ("ResNet-50 layout (torchscript)", False, ["call_b/resnet50_b64_graph.csv",
                                               "call_a/resnet50_b128_graph.csv"]),
]


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8") as f:
        return [r for r in csv.DictReader(f) if r.get("measured_status") == "ok"]


def _line(label: str, rows: list[dict[str, str]]) -> str:
    from grid_search.real import accuracy

    a = accuracy(rows)
    return (f"| {label} | {int(a['n'])} | {a['spearman']:.3f} | {a['kendall']:.3f} | "
            f"{a['median_latency_error'] * 100:.1f}% / {a['p90_latency_error'] * 100:.1f}% / "
            f"{a['worst_latency_error'] * 100:.1f}% | "
            f"{a['median_signed_latency_error'] * 100:+.1f}% | {a['top1_regret'] * 100:.1f}% | "
            f"{a['median_memory_error'] * 100:.1f}% / {a['worst_memory_error'] * 100:.1f}% |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", action="store_true", help="also print every row")
    a = ap.parse_args()
    print("| model, batch, rows | n | Spearman | Kendall | latency error median / p90 / worst "
          "| median signed | top-1 regret | memory error median / worst |")
    print("|---|---|---|---|---|---|---|---|")
    for model, held, files in STUDIES:
        for name in files:
            rows = _rows(HERE / name)
            b = rows[0]["batch_size"]
            tag = "" if held else " (not held out)"
            print(_line(f"{model}{tag}, batch {b}, all", rows))
            print(_line(f"{model}{tag}, batch {b}, 1F1B", [r for r in rows
                                                         if r["schedule"] == "1f1b"]))
            if a.rows:
                for r in sorted(rows, key=lambda r: float(r["measured_latency_s"])):
                    p, m = float(r["latency_s"]) * 1e3, float(r["measured_latency_s"]) * 1e3
                    print(f"    D{r['dp']} T{r['tp']} P{r['pp']} K{r['microbatches']} "
                          f"{r['schedule']:5}: predicted {p:7.2f} ms, measured {m:7.2f} ms, "
                          f"{(p / m - 1) * 100:+.1f}%")


if __name__ == "__main__":
    main()
