"""The accuracy study reports per batch size, with the worst error beside the median, and
never a figure pooled over batch sizes."""

from __future__ import annotations

import csv
import re
from pathlib import Path

from grid_search.real import accuracy
from grid_search.study import main

ROOT = Path(__file__).resolve().parents[2]
MEASURED = ROOT / "grid_search" / "results" / "h200x4" / "gpt2_measured.csv"


def test_accuracy_has_the_worst_error() -> None:
    rows = [{"latency_s": p, "measured_latency_s": 1.0, "peak_memory_bytes": 1.0,
             "measured_peak_memory_bytes": 1.0} for p in (1.1, 0.8, 1.05)]
    acc = accuracy(rows)
    assert abs(acc["median_latency_error"] - 0.1) < 1e-12
    assert abs(acc["worst_latency_error"] - 0.2) < 1e-12


def test_compare_is_per_batch_size(tmp_path: Path) -> None:
    with open(MEASURED, newline="", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if int(r["devices"]) <= 2]
    small = tmp_path / "measured.csv"
    with open(small, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    out = tmp_path / "study"
    assert main(["compare", str(small), "--hardware", "h200-sxm", "-o", str(out)]) == 0
    text = (tmp_path / "study.md").read_text(encoding="utf-8")
    assert "latency error: median / worst" in text
    per_batch = re.findall(r"^\| (\d+) \| \d+ \| [\d.]+ \| [\d.]+% / [\d.]+% \|", text, re.M)
    assert sorted(set(per_batch)) == sorted({r["batch_size"] for r in rows})
    assert not re.search(r"All \d+ (measured )?configurations", text)


def test_published_figures_are_per_batch_size() -> None:
    for md in [ROOT / "README.md", *sorted((ROOT / "grid_search" / "results").rglob("*.md"))]:
        text = md.read_text(encoding="utf-8")
        assert not re.search(r"All \d+ (measured )?configurations: Spearman", text), md
        assert not re.search(r"Spearman [\d.]+ over all", text), md
