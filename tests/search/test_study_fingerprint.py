"""Measured rows record the fingerprint of the program they ran; ``study compare`` refuses
rows whose program the transform no longer builds, and warns about rows without one."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from distir.transforms import analyze, dtp
from grid_search.models import workload
from grid_search.real import program_fingerprint
from grid_search.study import main


def _read(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _write(path: Path, rows: list[dict[str, str]], drop: str | None = None) -> None:
    cols = [c for c in rows[0] if c != drop]
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """D1, D2, T2 and P2 K2 of a small MLP step, measured on gloo (one and two ranks)."""
    out = tmp_path_factory.mktemp("measured") / "measured.csv"
    assert main(["measure", "--model", "mlp-2-32", "--dtype", "Float32", "--batch-sizes", "16",
                 "--max-devices", "2", "--max-microbatches", "2", "--backend", "gloo",
                 "--steps", "1", "--warmup", "0", "-o", str(out)]) == 0
    return out


def test_fingerprint_names_the_program() -> None:
    an = analyze(workload("mlp-2-32").build(16))
    one = program_fingerprint(dtp(an))
    assert re.fullmatch(r"[0-9a-f]{16}", one)
    assert one == program_fingerprint(dtp(an))
    others = {program_fingerprint(dtp(an, dp=2)), program_fingerprint(dtp(an, tp=2)),
              program_fingerprint(dtp(an, pp=2, microbatches=2)),
              program_fingerprint(dtp(an, pp=2, microbatches=2, schedule="gpipe"))}
    assert len(others) == 4 and one not in others


def test_measure_records_the_program_of_each_row(measured: Path) -> None:
    rows = _read(measured)
    # the profile that weighed the stages (measure's --hardware), and eager steps
    assert {(r["stages_hardware"], r["cuda_graph"]) for r in rows} == {("h100-sxm", "")}
    assert [(r["dp"], r["tp"], r["pp"], r["microbatches"]) for r in rows] == [
        ("1", "1", "1", "1"), ("1", "1", "2", "2"), ("1", "2", "1", "1"), ("2", "1", "1", "1")]
    an = analyze(workload("mlp-2-32", dtype="Float32").build(16))
    for r in rows:
        assert r["measured_status"] == "ok"
        fn = dtp(an, dp=int(r["dp"]), tp=int(r["tp"]), pp=int(r["pp"]),
                 microbatches=int(r["microbatches"]), schedule=r["schedule"])
        assert r["program_fingerprint"] == program_fingerprint(fn)


def test_compare_checks_every_row(measured: Path, tmp_path: Path) -> None:
    out = tmp_path / "study"
    assert main(["compare", str(measured), "--dtype", "Float32", "--hardware", "h100-sxm",
                 "-o", str(out)]) == 0
    text = (tmp_path / "study.md").read_text(encoding="utf-8")
    assert "Programs: 4 row(s) record the fingerprint of the program the transform builds" \
        in text
    assert "warning" not in text


def test_compare_refuses_a_row_measured_on_another_program(
        measured: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = _read(measured)
    rows[2]["program_fingerprint"] = "0123456789abcdef"  # the T2 row, line 4 of the file
    stale = tmp_path / "stale.csv"
    _write(stale, rows)
    capsys.readouterr()
    assert main(["compare", str(stale), "--dtype", "Float32", "--hardware", "h100-sxm",
                 "-o", str(tmp_path / "study")]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert f"{stale}:4 (batch 16, D1 T2 P1 K1 1f1b) was measured on program 0123456789abcdef" \
        in err
    assert "measure it again" in err and not (tmp_path / "study.md").exists()
    # Measured in another dtype: every program differs, the first row is named.
    assert main(["compare", str(measured), "--dtype", "Float16", "--hardware", "h100-sxm",
                 "-o", str(tmp_path / "study")]) == 1
    assert f"{measured}:2 (batch 16, D1 T1 P1 K1" in capsys.readouterr().err


def test_skip_stale_leaves_the_row_out(measured: Path, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    rows = _read(measured)
    rows[2]["program_fingerprint"] = "0123456789abcdef"
    stale = tmp_path / "stale.csv"
    _write(stale, rows)
    out = tmp_path / "study"
    assert main(["compare", str(stale), "--dtype", "Float32", "--hardware", "h100-sxm",
                 "--skip-stale", "-o", str(out)]) == 0
    assert "1 row(s) left out (--skip-stale)" in capsys.readouterr().err
    got = _read(tmp_path / "study.csv")
    assert [(r["dp"], r["tp"]) for r in got] == [("1", "1"), ("1", "1"), ("2", "1")]
    text = (tmp_path / "study.md").read_text(encoding="utf-8")
    assert "Programs: 3 row(s)" in text and "D1 T2 P1 K1" in text


def test_rows_without_a_fingerprint_are_compared_with_a_warning(
        measured: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = tmp_path / "old.csv"
    _write(old, _read(measured), drop="program_fingerprint")
    capsys.readouterr()
    assert main(["compare", str(old), "--dtype", "Float32", "--hardware", "h100-sxm",
                 "-o", str(tmp_path / "study")]) == 0
    err = capsys.readouterr().err
    assert "warning: " in err and "4 measured row(s) record no program fingerprint" in err
    text = (tmp_path / "study.md").read_text(encoding="utf-8")
    assert "Programs: 0 row(s)" in text and "record no program fingerprint" in text
    assert len(_read(tmp_path / "study.csv")) == 4


def test_measure_runs_only_the_configurations_named(tmp_path: Path) -> None:
    out = tmp_path / "some.csv"
    assert main(["measure", "--model", "mlp-2-32", "--dtype", "Float32", "--batch-sizes", "16",
                 "--max-devices", "2", "--max-microbatches", "2", "--backend", "gloo",
                 "--steps", "1", "--warmup", "0", "--configs", "2,1,1,1", "1,1,2,2",
                 "-o", str(out)]) == 0
    got = {(r["dp"], r["tp"], r["pp"], r["microbatches"]) for r in _read(out)}
    assert got == {("2", "1", "1", "1"), ("1", "1", "2", "2")}


@pytest.mark.parametrize("bad, says", [("2,1", "expected D,T,P,K"),
                                       ("8,1,1,1", "is not in the space measured")])
def test_measure_refuses_bad_configs_in_one_line(bad: str, says: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture) -> None:
    assert main(["measure", "--model", "mlp-2-32", "--dtype", "Float32", "--batch-sizes", "16",
                 "--max-devices", "2", "--backend", "gloo", "--configs", bad,
                 "-o", str(tmp_path / "x.csv")]) == 1
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1


def test_compare_shows_the_host_time_where_the_profile_models_it(
        measured: Path, tmp_path: Path, host_profile: Path) -> None:
    prof = host_profile
    out = tmp_path / "cmp"
    assert main(["compare", str(measured), "--dtype", "Float32", "--hardware", str(prof),
                 "-o", str(out)]) == 0
    text = (tmp_path / "cmp.md").read_text()
    assert "| host ms |" in text
    rows = _read(tmp_path / "cmp.csv")
    # At 1 ms per op the steps are host-bound: the busiest host's time is the latency.
    assert all(float(r["host_s"]) == pytest.approx(float(r["latency_s"]), rel=0.05)
               for r in rows)
    assert main(["compare", str(measured), "--dtype", "Float32", "--hardware", "h100-sxm",
                 "-o", str(tmp_path / "plain")]) == 0
    assert "host ms" not in (tmp_path / "plain.md").read_text()


def test_compare_simulates_cuda_graph_rows_without_hosts(
        measured: Path, tmp_path: Path, host_profile: Path) -> None:
    """Rows measured as CUDA graph replays (``measure --cuda-graph``) are simulated without
    the profile's host dispatch; the others with it."""

    prof = host_profile
    rows = _read(measured)
    for r in rows[:2]:
        r["cuda_graph"] = "true"
    graph_rows = tmp_path / "graph.csv"
    cols = list(dict.fromkeys([*rows[0], "cuda_graph"]))
    with open(graph_rows, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, cols, restval="")
        w.writeheader()
        w.writerows(rows)
    for name, path in (("host", measured), ("graph", graph_rows)):
        assert main(["compare", str(path), "--dtype", "Float32", "--hardware", str(prof),
                     "-o", str(tmp_path / name)]) == 0
    host, graph = _read(tmp_path / "host.csv"), _read(tmp_path / "graph.csv")
    assert main(["compare", str(measured), "--dtype", "Float32", "--hardware", "h100-sxm",
                 "-o", str(tmp_path / "plain")]) == 0
    plain = _read(tmp_path / "plain.csv")
    for i in range(2):  # replays: the profile without hosts, far faster than 1 ms an op
        assert graph[i]["host_s"] == ""
        assert float(graph[i]["latency_s"]) == pytest.approx(float(plain[i]["latency_s"]))
        assert float(graph[i]["latency_s"]) < float(host[i]["latency_s"]) / 10
    for i in range(2, len(rows)):  # eager rows as before
        assert graph[i]["latency_s"] == host[i]["latency_s"]
    assert "CUDA graph replays" in (tmp_path / "graph.md").read_text()


def test_compare_reports_the_spread_between_repeated_measurements(
        measured: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--repeat``: each row gains the spread between its measurements, and the report how
    many latency errors exceed it; other models or other programs are refused in one line."""
    rows = _read(measured)
    again = [dict(r) for r in rows]
    again[1]["measured_latency_s"] = str(float(rows[1]["measured_latency_s"]) * 1.25)
    again = again[1:]  # the first configuration was not measured again
    path = tmp_path / "again.csv"
    _write(path, again)
    out = tmp_path / "rep"
    assert main(["compare", str(measured), "--repeat", str(path), "--dtype", "Float32",
                 "--hardware", "h100-sxm", "-o", str(out)]) == 0
    got = _read(tmp_path / "rep.csv")
    assert got[0]["measured_spread"] == ""
    assert float(got[1]["measured_spread"]) == pytest.approx(0.25, rel=1e-4)
    assert all(float(r["measured_spread"]) == pytest.approx(0.0, abs=1e-6) for r in got[2:])
    text = (tmp_path / "rep.md").read_text(encoding="utf-8")
    assert "| batch | configs measured again | spread: median / p90 / worst |" in text
    assert "| 16 | 3 | 0.0% / 20.0% / 25.0% |" in text
    head = next(ln for ln in text.splitlines() if ln.startswith("| batch | D | T | P | K |"))
    col = [c.strip() for c in head.split("|")].index("spread")
    table = [[c.strip() for c in ln.split("|")] for ln in text.splitlines()
             if ln.startswith("| 16 | ") and ln.count("|") == head.count("|")]
    assert len(table) == len(rows)
    assert [t[col] for t in table] == ["", "25.0%", "0.0%", "0.0%"]  # the first: not again

    capsys.readouterr()
    bad = [dict(r, model="mlp-9-9") for r in again]
    _write(path, bad)
    assert main(["compare", str(measured), "--repeat", str(path), "--dtype", "Float32",
                 "-o", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert "same study" in err and len(err.splitlines()) == 1
    other = [dict(r, program_fingerprint="0" * 16) for r in again]
    _write(path, other)
    assert main(["compare", str(measured), "--repeat", str(path), "--dtype", "Float32",
                 "-o", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert "different programs" in err and len(err.splitlines()) == 1
    _write(path, [dict(r, cuda_graph="true") for r in again])  # replays beside eager steps
    assert main(["compare", str(measured), "--repeat", str(path), "--dtype", "Float32",
                 "-o", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert "as CUDA graph replays" in err and len(err.splitlines()) == 1
    path.write_bytes(b"\xff\xfe\x00binary")
    assert main(["compare", str(measured), "--repeat", str(path), "--dtype", "Float32",
                 "-o", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert "not a CSV file" in err and len(err.splitlines()) == 1
    _write(path, [dict(r, batch_size="64") for r in again])  # nothing in common
    assert main(["compare", str(measured), "--repeat", str(path), "--dtype", "Float32",
                 "-o", str(out)]) == 0
    assert "adds no spread" in capsys.readouterr().err


def test_compare_reports_host_paced_rows_apart(measured: Path, tmp_path: Path) -> None:
    """Rows whose measured host share is from ``HOST_BOUND`` on are named per batch size, with
    the accuracy on the others beside (never instead of) the accuracy on all."""
    rows = _read(measured)
    for r, share in zip(rows, ("0.95", "0.30", "0.50", "0.79")):
        r["measured_host_share"] = share
        r["measured_host_cost_s"] = str(float(share) * float(r["measured_latency_s"]))
    path = tmp_path / "hosts.csv"
    _write(path, rows)
    assert main(["compare", str(path), "--dtype", "Float32", "--hardware", "h100-sxm",
                 "-o", str(tmp_path / "h")]) == 0
    text = (tmp_path / "h.md").read_text(encoding="utf-8")
    # the accuracy on every row is still there (next raises where a line is missing)
    next(ln for ln in text.splitlines() if ln.startswith("| 16 | 4 | "))
    line = next(ln for ln in text.splitlines() if ln.startswith("| 16 | 1 of 4 "))
    assert "(D1 T1 P1 K1) | 3 (0) |" in line
    rows[3]["measured_host_share"] = ""  # without a host cost: among the others, counted
    _write(path, rows)
    assert main(["compare", str(path), "--dtype", "Float32", "--hardware", "h100-sxm",
                 "-o", str(tmp_path / "h")]) == 0
    text = (tmp_path / "h.md").read_text(encoding="utf-8")
    assert "(D1 T1 P1 K1) | 3 (1) |" in text
    assert "| 95% |" in text and "| 50% |" in text  # the per-configuration column
    for r in rows:  # rows without the values: nothing said
        r["measured_host_share"] = ""
    _write(path, rows)
    assert main(["compare", str(path), "--dtype", "Float32", "--hardware", "h100-sxm",
                 "-o", str(tmp_path / "n")]) == 0
    assert "Host-paced" not in (tmp_path / "n.md").read_text(encoding="utf-8")


def test_measure_on_the_cpu_records_no_clocks(measured: Path) -> None:
    """The clock columns are in every measured file, empty where no GPU was read."""
    for r in _read(measured):
        assert r["measured_clock_events"] == "" and r["measured_sm_clock_mhz"] == ""


def test_compare_reports_rows_measured_on_slowed_gpus_apart(measured: Path,
                                                            tmp_path: Path) -> None:
    """Rows measured on slowed cards are named per batch size, with the accuracy on the
    others beside (never instead of) the accuracy on all."""
    rows = _read(measured)
    clocks = (("1410", "hw_thermal"), ("1980", "none"), ("1890", "sw_power_cap"),
              ("1200", "none"))
    for r, (mhz, events) in zip(rows, clocks):
        r.update(measured_sm_clock_mhz=mhz, measured_max_sm_clock_mhz="1980",
                 measured_clock_events=events)
    path = tmp_path / "clocks.csv"
    _write(path, rows)
    assert main(["compare", str(path), "--dtype", "Float32", "--hardware", "h100-sxm",
                 "-o", str(tmp_path / "c")]) == 0
    text = (tmp_path / "c.md").read_text(encoding="utf-8")
    next(ln for ln in text.splitlines() if ln.startswith("| 16 | 4 | "))  # all rows still
    line = next(ln for ln in text.splitlines() if ln.startswith("| 16 | 2 of 4: "))
    assert "D1 T1 P1 K1 (1410 of 1980 MHz, hw_thermal)" in line
    assert "D2 T1 P1 K1 (1200 of 1980 MHz)" in line  # held below 70% of the maximum
    assert "| 2 (0) | - |" in line  # too few others for figures
    for r in rows:  # rows without clocks (older files): nothing said
        r.update(measured_sm_clock_mhz="", measured_max_sm_clock_mhz="",
                 measured_clock_events="")
    _write(path, rows)
    assert main(["compare", str(path), "--dtype", "Float32", "--hardware", "h100-sxm",
                 "-o", str(tmp_path / "n")]) == 0
    assert "slowed GPUs" not in (tmp_path / "n.md").read_text(encoding="utf-8")
