"""``distir optimize --run-top``: the best plans lowered, run for real on the CPU (gloo, two
processes, a tiny MLP) and compared with their predictions; saved plans run later."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

import distir
from distir.cli import main
from distir.errors import ConfigError
from distir.transforms.spmd import optimize
from grid_search.optimize import PLAN_COLUMNS, run_saved_plans, run_top_plans, save_plans


def _result() -> object:
    fn = distir.models.mlp(batch_size=64, input_dim=32, hidden_dim=32, output_dim=32,
                           num_layers=2)
    return optimize(fn, 2, beam=8, max_states=200, top_k=2)


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_run_top_measures_and_writes_the_csv(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    res = _result()
    out = tmp_path / "m.csv"
    rows = run_top_plans(res, 2, backend="gloo", out=str(out), hardware="h100-sxm",
                         steps=2, warmup=1, progress=None)
    assert len(rows) == 2
    disk = _rows(out)
    assert list(disk[0]) == PLAN_COLUMNS
    assert [r["measured_status"] for r in disk] == ["ok", "ok"]
    assert all(float(r["measured_ms"]) > 0 and float(r["simulated_ms"]) > 0 for r in disk)
    assert all(int(r["measured_static_peak_bytes"]) > 0 for r in disk)
    assert all(int(r["peak_memory_predicted_bytes"]) > 0 for r in disk)
    # fastest predicted first, distinct programs
    assert float(disk[0]["simulated_ms"]) <= float(disk[1]["simulated_ms"])
    assert disk[0]["program_fingerprint"] != disk[1]["program_fingerprint"]
    text = capsys.readouterr().out
    assert "Spearman's rank correlation" in text and "5%" in text
    assert "warning: the runs were measured on cpu" in text


def test_saved_plans_run_later(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    res = _result()
    files = save_plans(res, str(tmp_path / "plans"), 2)
    assert [Path(f).name for f in files] == ["plan1.dir", "plan2.dir"]
    assert distir.dumps(distir.load(files[0]).entry) == distir.dumps(res.program)
    rows = run_saved_plans(str(tmp_path / "plans"), backend="gloo", steps=1, warmup=0,
                           progress=None)
    assert [r["measured_status"] for r in rows] == ["ok", "ok"]
    assert rows[0]["simulated_ms"] == f"{res.simulation.latency_s * 1e3:.6f}"
    with pytest.raises(ConfigError, match="no plans.csv here"):
        run_saved_plans(str(tmp_path))


def test_cli_run_top(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = tmp_path / "best.dir"
    rc = main(["optimize", "--model", "mlp", "--num-layers", "2", "--width", "32",
               "--batch-size", "64", "--devices", "2", "--beam", "8", "--top-k", "1",
               "-o", str(plan), "--run-top", "1", "--backend", "gloo", "--steps", "1",
               "--warmup", "0"])
    assert rc == 0
    rows = _rows(tmp_path / "best-measured.csv")
    assert len(rows) == 1 and rows[0]["measured_status"] == "ok"
    assert "predicted fastest measured" in capsys.readouterr().out
    assert main(["optimize", "--devices", "2"]) == 1
    assert "needs --model and --devices" in capsys.readouterr().err


def test_cli_cuda_graph(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                       host_profile: Path) -> None:
    """``--cuda-graph``: plans simulated without host dispatch, and their runs replayed as
    graphs, which CPU ranks refuse: each plan's row then says why, in one line."""

    prof = host_profile
    best = {}
    for name, extra in (("eager", []), ("graph", ["--cuda-graph"])):
        argv = ["optimize", "--model", "mlp", "--num-layers", "2", "--width", "32",
                "--batch-size", "64", "--devices", "2", "--beam", "8", "--top-k", "1",
                "--hardware", str(prof), "-o", str(tmp_path / f"{name}.dir"), *extra]
        if name == "graph":
            argv += ["--run-top", "1", "--backend", "gloo", "--steps", "1"]
        assert main(argv) == 0
        out = capsys.readouterr().out
        best[name] = float(out.split(": best ")[1].split(" ms")[0])
    assert "(CUDA graphs)" in out
    assert best["graph"] * 10 < best["eager"]  # no host at 1 ms an op
    (row,) = _rows(tmp_path / "graph-measured.csv")
    assert row["measured_status"] == "error" and "CUDA graphs need a GPU" in row["reason"]
