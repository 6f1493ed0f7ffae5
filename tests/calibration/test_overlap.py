"""The overlap benchmark (``calibration.overlap``): its fit, the profile it writes, and a
gloo run on CPU processes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from calibration.overlap import comm_slowdown, main, slowdown, write_profile
from distir.analysis.hardware import load_hardware

ROOT = Path(__file__).resolve().parents[2]


def test_slowdown_is_the_clipped_median() -> None:
    rows = [{"slowdown": x} for x in (0.1, 0.3, 0.2)]
    assert slowdown(rows) == pytest.approx(0.2)
    assert slowdown([{"slowdown": -0.4}]) == 0.0
    assert slowdown([{"slowdown": 1.7}]) == 1.0
    with pytest.raises(ValueError):
        slowdown([])
    both = [{"slowdown": 0.2, "compute": "mm"}, {"slowdown": 0.9, "compute": "memory"}]
    assert slowdown(both) == pytest.approx(0.2)
    assert slowdown(both, "memory") == pytest.approx(0.9)


def test_write_profile_sets_the_field_the_simulator_reads(tmp_path: Path) -> None:
    src = ROOT / "calibration" / "profiles" / "h100-sxm-datasheet.json"
    out = tmp_path / "p.json"
    write_profile(str(src), 0.123456, str(out))
    assert json.loads(out.read_text())["interconnect"]["overlap_slowdown"] == 0.1235
    assert load_hardware(str(out)).overlap_slowdown == pytest.approx(0.1235)
    assert load_hardware(str(src)).overlap_slowdown == 0.0  # absent: a free overlap


def test_comm_slowdown_is_the_collectives_extra_time_per_second_beside() -> None:
    # 1 ms all-reduce, 0.2 ms kernel beside it, both 1.06 ms: 0.3 s per second; a kernel
    # longer than the collective, or of the other kind, is not counted.
    row = {"compute": "memory", "t_comm": 1e-3, "t_compute": 2e-4, "t_both": 1.06e-3}
    assert comm_slowdown([row], 0.0) == pytest.approx(0.3)
    # 0.9 ms kernel: only (1 - 0.5) x 1 ms of it runs beside (it starts 0.5 ms late).
    assert comm_slowdown([{**row, "t_compute": 9e-4}], 0.5) == pytest.approx(0.12)
    with pytest.raises(ValueError):
        comm_slowdown([{**row, "t_compute": 2e-3}, {**row, "compute": "mm"}], 0.0)


def test_fit_comm_on_the_committed_measurements(tmp_path: Path,
                                                capsys: pytest.CaptureFixture) -> None:
    runs = ROOT / "grid_search" / "results" / "overlap_comm_2gpu"
    src = ROOT / "calibration" / "profiles" / "h100-sxm-datasheet.json"
    out = tmp_path / "p.json"
    assert main(["--fit-comm", str(runs / "r0.4_graph_1.json"), str(runs / "r0.4_graph_2.json"),
                 "--overlap-slowdown", "0.3738", "--profile", str(src),
                 "--write", str(out)]) == 0
    assert "overlap_comm_slowdown (median" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["interconnect"]["overlap_comm_slowdown"] == pytest.approx(0.2986)
    assert [c for c in data["comment"] if c.startswith("overlap_comm_slowdown 0.2986: ")]
    assert load_hardware(str(out)).overlap_comm_slowdown == pytest.approx(0.2986)
    assert main(["--fit-comm", str(runs / "r0.4_graph_1.json")]) == 2  # no overlap_slowdown


def test_gloo_run_writes_rows_and_the_profile(tmp_path: Path,
                                              capsys: pytest.CaptureFixture) -> None:
    import torch  # noqa: F401 - the test needs it
    src = ROOT / "calibration" / "profiles" / "h100-sxm-datasheet.json"
    out, rows_path = tmp_path / "p.json", tmp_path / "rows.json"
    assert main(["--cpu", "--world", "2", "--trials", "1", "--profile", str(src),
                 "--write", str(out), "--json", str(rows_path)]) == 0
    rows = json.loads(rows_path.read_text())
    assert [r["bytes"] for r in rows] == [1 << 20, 4 << 20]
    for r in rows:
        assert r["group_size"] == 2 and r["reps"] >= 1 and r["device"] == "cpu"
        assert min(r["t_comm"], r["t_compute"], r["t_both"]) > 0
    assert 0.0 <= load_hardware(str(out)).overlap_slowdown <= 1.0
    assert "overlap_slowdown (median" in capsys.readouterr().out


def test_gloo_run_beside_a_bandwidth_bound_kernel(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture) -> None:
    rows_path = tmp_path / "rows.json"
    assert main(["--cpu", "--world", "2", "--trials", "1", "--memory",
                 "--json", str(rows_path)]) == 0
    rows = json.loads(rows_path.read_text())
    assert [(r["compute"], r["bytes"]) for r in rows] == [
        ("mm", 1 << 20), ("mm", 4 << 20), ("memory", 1 << 20), ("memory", 4 << 20)]
    assert slowdown(rows) == slowdown(rows[:2])  # the profile's value: the products'
    assert "beside the bandwidth-bound kernel" in capsys.readouterr().out


def test_gloo_run_at_given_sizes(tmp_path: Path) -> None:
    rows_path = tmp_path / "rows.json"
    assert main(["--cpu", "--world", "2", "--trials", "1", "--memory", "--ratio", "0.4",
                 "--sizes", "0.5", "2", "--json", str(rows_path)]) == 0
    rows = json.loads(rows_path.read_text())
    assert [(r["compute"], r["bytes"], r["ratio"]) for r in rows] == [
        ("mm", 1 << 19, 0.4), ("mm", 2 << 20, 0.4), ("memory", 1 << 19, 0.4),
        ("memory", 2 << 20, 0.4)]
    assert main(["--cpu", "--sizes", "0"]) == 2


def test_one_process_is_refused(capsys: pytest.CaptureFixture) -> None:
    assert main(["--cpu", "--world", "1"]) == 2
    assert "needs 2 or more processes" in capsys.readouterr().err


@pytest.mark.parametrize("content,expect", [
    (None, "does not exist"), ("{", "invalid JSON"), ("{}", "not a distir hardware profile")])
def test_bad_profile_is_one_line_before_measuring(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                  content: str | None, expect: str) -> None:
    path = tmp_path / "p.json"
    if content is not None:
        path.write_text(content)
    assert main(["--cpu", "--profile", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    # "error: ..." or, where the place is known, "FILE:LINE:COL: error: ...", said once.
    assert expect in err and "\n" not in err and err.count("error:") == 1
    assert main(["--cpu", "--profile", "h200-sxm"]) == 2
    assert ".json file" in capsys.readouterr().err


def test_cuda_graph_on_cpu_is_refused_in_one_line(capsys: pytest.CaptureFixture) -> None:
    assert main(["--cpu", "--cuda-graph"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--cuda-graph needs GPUs" in err and "\n" not in err


@pytest.mark.skipif("not __import__('torch').cuda.is_available() or "
                    "__import__('torch').cuda.device_count() < 2", reason="needs 2 GPUs")
def test_cuda_graph_rows_on_gpus() -> None:
    from calibration.overlap import measure_overlap

    rows = measure_overlap(2, "nccl", [8 << 20], trials=2, cuda_graph=True)
    assert rows[0]["cuda_graph"] and min(rows[0]["t_comm"], rows[0]["t_both"]) > 0


def test_a_short_compute_rows_and_a_bad_ratio(tmp_path: Path,
                                               capsys: pytest.CaptureFixture) -> None:
    rows_path = tmp_path / "rows.json"
    assert main(["--cpu", "--world", "2", "--trials", "1", "--ratio", "0.4",
                 "--json", str(rows_path)]) == 0
    rows = json.loads(rows_path.read_text())
    assert all(r["ratio"] == 0.4 and r["reps"] >= 1 for r in rows)
    assert "both/longer" in capsys.readouterr().out
    assert main(["--cpu", "--ratio", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--ratio 0.0" in err and "\n" not in err
