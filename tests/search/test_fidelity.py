"""The fidelity metrics of docs/fidelity.md: rank correlations, tail errors, top-1 regret,
the out-of-memory prediction, the held-out flag and the memory-check selection."""

from __future__ import annotations

import csv
import itertools
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from distir.analysis.hardware import load_hardware
from grid_search.real import accuracy, kendall, quantile, spearman
from grid_search.study import (
    DEVELOPMENT,
    _configs,
    fidelity_table,
    held_out_note,
    main,
    memory_check_configs,
)

ROOT = Path(__file__).resolve().parents[2]
H100 = ROOT / "grid_search" / "results" / "h100x4"


def _kendall_by_definition(a: list[float], b: list[float]) -> float:
    pairs = list(itertools.combinations(range(len(a)), 2))
    s = sum(np.sign(a[i] - a[j]) * np.sign(b[i] - b[j]) for i, j in pairs)
    ta = sum(a[i] != a[j] for i, j in pairs)
    tb = sum(b[i] != b[j] for i, j in pairs)
    return float(s / math.sqrt(ta * tb))


def test_kendall_tau_b() -> None:
    assert kendall([1, 2, 3, 4], [10, 20, 30, 40]) == 1.0
    assert kendall([1, 2, 3, 4], [4, 3, 2, 1]) == -1.0
    rng = np.random.default_rng(3)
    for _ in range(20):
        a = list(rng.integers(0, 5, 12).astype(float))  # with ties
        b = list(rng.integers(0, 5, 12).astype(float))
        assert kendall(a, b) == pytest.approx(_kendall_by_definition(a, b))
    assert math.isnan(kendall([1.0], [2.0]))
    assert math.isnan(kendall([1.0, 1.0], [1.0, 2.0]))


def test_quantile_matches_numpy() -> None:
    rng = np.random.default_rng(0)
    for n in (1, 2, 7, 26):
        xs = list(rng.random(n))
        for q in (0.0, 0.5, 0.9, 1.0):
            assert quantile(xs, q) == pytest.approx(float(np.quantile(xs, q)))
    assert math.isnan(quantile([], 0.5))


def _row(pred: float, meas: float, mem: float = 1.0, mmem: float = 1.0) -> dict[str, Any]:
    return {"latency_s": pred, "measured_latency_s": meas, "peak_memory_bytes": mem,
            "measured_peak_memory_bytes": mmem}


def test_accuracy_tails_and_regret() -> None:
    # Predicted fastest: the first (0.5), which measured 1.2 against a best of 1.0.
    rows = [_row(0.5, 1.2), _row(0.9, 1.0), _row(1.5, 2.0, 1.1), _row(2.2, 2.0, 0.7)]
    acc = accuracy(rows)
    errs = [abs(p - m) / m for p, m in ((0.5, 1.2), (0.9, 1.0), (1.5, 2.0), (2.2, 2.0))]
    assert acc["top1_regret"] == pytest.approx(0.2)
    assert acc["median_latency_error"] == pytest.approx(float(np.median(errs)))
    assert acc["p90_latency_error"] == pytest.approx(float(np.quantile(errs, 0.9)))
    assert acc["worst_latency_error"] == pytest.approx(max(errs))
    assert acc["median_signed_latency_error"] == pytest.approx(
        float(np.median([(p - m) / m for p, m in ((0.5, 1.2), (0.9, 1.0), (1.5, 2.0),
                                                     (2.2, 2.0))])))
    assert acc["worst_memory_error"] == pytest.approx(0.3)
    assert acc["p90_memory_error"] == pytest.approx(float(np.quantile([0, 0, 0.1, 0.3], 0.9)))
    assert acc["kendall"] == pytest.approx(kendall([0.5, 0.9, 1.5, 2.2], [1.2, 1.0, 2.0, 2.0]))
    assert acc["spearman"] == pytest.approx(spearman([0.5, 0.9, 1.5, 2.2],
                                                     [1.2, 1.0, 2.0, 2.0]))
    assert accuracy([_row(1.0, 1.0), _row(2.0, 2.5)])["top1_regret"] == 0.0


def test_fidelity_table_counts_out_of_memory_per_batch() -> None:
    rows = []
    for b, fits, status in [(8, "true", "ok"), (8, "true", "oom"), (8, "false", "oom"),
                            (8, "false", "ok"), (16, "true", "ok"), (16, "false", "oom")]:
        rows.append({"batch_size": b, "latency_s": 1.0, "measured_latency_s":
                     1.1 if status == "ok" else "", "measured_status": status,
                     "predicted_fits": fits, "peak_memory_bytes": 1,
                     "measured_peak_memory_bytes": 1})
    table = fidelity_table(rows)
    assert table[2].startswith("| 8 | 2 |") and table[2].endswith("| 2 of 4 / 1 |")
    assert table[3].startswith("| 16 | 1 |") and table[3].endswith("| 2 of 2 / 0 |")


def test_held_out_flag() -> None:
    assert ("mlp-1b", "Float16") in DEVELOPMENT and ("gpt2-1.6b", "Float16") in DEVELOPMENT
    assert held_out_note("mlp-1b", "Float16").startswith("**Not held out**")
    assert held_out_note("mlp-1b", "BFloat16").startswith("Held out")
    assert held_out_note("gpt2-13b", "Float16").startswith("Held out")


def test_memory_check_picks_both_sides_nearest_first() -> None:
    from grid_search.models import workload

    w = workload("mlp-4-256", dtype="Float32")
    configs = _configs(w, [64, 256], 2, 4, "1f1b")
    # (the peaks count h100-sxm's cuBLAS workspaces besides the tensors)
    limit = 2_400_000 + load_hardware("h100-sxm").workspace_held
    picked = memory_check_configs(w, configs, "h100-sxm", limit, 0.5, 4)
    peaks = list(picked.values())
    assert len(picked) == 4
    assert sum(p > limit for p in peaks) == 2 and sum(p <= limit for p in peaks) == 2
    assert all(abs(p / limit - 1) <= 0.5 for p in peaks)
    everything = memory_check_configs(w, configs, "h100-sxm", limit, 0.5, 100)
    above = sorted(p for p in everything.values() if p > limit)
    below = sorted((p for p in everything.values() if p <= limit), reverse=True)
    assert sorted(peaks) == sorted(above[:2] + below[:2])


def test_compare_reports_fidelity_and_not_held_out(tmp_path: Path) -> None:
    with open(H100 / "gpt2_measured_h100x4.csv", newline="", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if int(r["devices"]) <= 2]
    small = tmp_path / "measured.csv"
    with open(small, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    out = tmp_path / "study"
    assert main(["compare", str(small), "--hardware", str(H100 / "h100-sxm.json"),
                 "-o", str(out)]) == 0
    text = (tmp_path / "study.md").read_text(encoding="utf-8")
    assert "**Not held out**" in text
    assert "| batch | configs | Spearman | Kendall tau | latency error: median / p90 / worst" \
        in text
    with open(tmp_path / "study.csv", newline="", encoding="utf-8") as f:
        got = list(csv.DictReader(f))
    assert {r["predicted_fits"] for r in got if r["latency_s"]} <= {"true", "false"}


def test_study_explain_writes_table_json_and_perfetto(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture) -> None:
    import json

    out = tmp_path / "x"
    assert main(["explain", "--model", "mlp-2-32", "--dtype", "Float32", "--batch-size", "16",
                 "--backend", "gloo", "--steps", "1", "--warmup", "0", "-o", str(out)]) == 0
    table = (out / "explain.txt").read_text(encoding="utf-8")
    assert table.startswith("mlp-2-32 (Float32) batch 16, D1 T1 P1 K1 1f1b")
    assert "per op kind" in capsys.readouterr().out
    doc = json.loads((out / "explain.json").read_text(encoding="utf-8"))
    assert doc["run"]["status"] == "ok" and {k["kind"] for k in doc["kinds"]} >= {
        "MatMul", "MatMulGrad", "SGDOptimizer"}
    assert (out / "prof" / "rank0.json").exists() and (out / "perfetto.json").exists()
    assert (out / "program.dir").read_text(encoding="utf-8").startswith("func @")
