"""The grid search on a small model: the space, refusals, memory filtering, resume."""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import re
from collections import Counter

import pytest

from distir.analysis.hardware import load_hardware
from grid_search import COLUMNS, enumerate_space, read_rows, run_search, summarize, workload
from grid_search.models import PRESETS
from grid_search.real import accuracy, spearman
from grid_search.space import Config

W = workload("mlp", num_layers=4, width=64)


def _configs(devices: int = 4, batch: int = 32, **kw: object) -> list[Config]:
    return list(enumerate_space(W.name, devices, [batch], **kw))  # type: ignore[arg-type]


def test_space_of_the_paper_has_75_configurations_for_16_devices() -> None:
    cs = list(enumerate_space("mlp-1b", 16, [8192]))
    assert len(cs) == 75
    assert len(set(c.key for c in cs)) == 75
    assert all(c.dp * c.tp * c.pp == 16 for c in cs)
    assert all((c.microbatches == 1) == (c.pp == 1) for c in cs)
    assert Counter(c.microbatches for c in cs if c.pp > 1) == {k: 10 for k in
                                                               (2, 4, 8, 16, 32, 64, 128)}


def test_fewer_devices_and_schedules_extend_the_space() -> None:
    base = _configs(4)
    more = _configs(4, fewer_devices=True)
    assert set(c.key for c in base) < set(c.key for c in more)
    assert {c.devices for c in more} == {1, 2, 4}
    both = _configs(4, schedules=("1f1b", "gpipe"))
    assert len(both) == len(base) + sum(1 for c in base if c.pp > 1)


def test_devices_must_be_a_power_of_two() -> None:
    from distir.errors import ConfigError

    with pytest.raises(ConfigError, match="power of two"):
        _configs(6)


def test_every_configuration_appears_once_with_refusals_recorded(tmp_path) -> None:
    out = str(tmp_path / "r.csv")
    cs = _configs(4, batch=8, max_microbatches=16)
    res = run_search(W, cs, hardware="h200-sxm", out=out, progress=None)
    rows = read_rows(out)
    assert [tuple(r[k] for k in ("dp", "tp", "pp", "microbatches")) for r in rows] == [
        (str(c.dp), str(c.tp), str(c.pp), str(c.microbatches)) for c in cs]
    assert len(res.rows) == len(cs)
    refused = [r for r in rows if r["status"] == "refused"]
    # A per-replica batch of 8/dp cannot be split in 16 microbatches.
    assert refused and all(r["reason"] and r["fits"] == "False" for r in refused)
    assert any("microbatches" in r["reason"] for r in refused)
    ok = [r for r in rows if r["status"] == "ok"]
    assert ok and all(float(r["latency_s"]) > 0 and r["fits"] == "True" for r in ok)
    assert all(len(json.loads(r["peak_memory_per_device"])) == int(r["devices"]) for r in ok)


def test_configurations_that_do_not_fit_are_marked_and_not_ranked(tmp_path) -> None:
    from grid_search.report import best_rows

    cs = _configs(4)
    base = run_search(W, cs, hardware="h200-sxm", progress=None).rows
    peaks = sorted(r["peak_memory_bytes"] for r in base if r["status"] == "ok")
    # bytes: about half the configurations fit (the tensors' peaks, without the cuBLAS
    # workspaces that h200-sxm's peaks count and the tiny profile leaves out)
    cap = peaks[len(peaks) // 2] - load_hardware("h200-sxm").workspace_held
    prof = json.load(open(os.path.join(os.path.dirname(__file__), "..", "..", "calibration",
                                       "profiles", "h200-sxm.json")))
    prof["name"] = "tiny"
    prof["device"]["memory_bytes"] = cap
    prof["device"].pop("reserved_bytes", None)  # the whole cap is the tensors'
    prof["device"].pop("outside_allocator", None)
    prof["device"].pop("workspace_bytes", None)
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(prof))
    rows = run_search(W, cs, hardware=str(path), progress=None).rows
    oom = [r for r in rows if r["status"] == "oom"]
    fit = [r for r in rows if r["status"] == "ok"]
    assert oom and fit
    assert all(r["fits"] is False and "GiB" in r["reason"] for r in oom)
    assert all(r["peak_memory_bytes"] <= cap for r in fit)
    # (near the cap, the allocator's replayed reserve decides: distir.analysis.allocator)
    assert all(r["peak_memory_bytes"] > cap or "caching allocator" in r["reason"]
               for r in oom)
    ranked = best_rows(rows, len(rows))
    assert {id(r) for r in ranked} == {id(r) for r in fit}
    assert f"{len(oom)} out of memory" in summarize(rows)


def _strip(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    return [{k: v for k, v in r.items() if k != "sim_seconds"} for r in rows]


def test_resume_after_an_interrupted_run_gives_the_same_file(tmp_path) -> None:
    cs = _configs(4)
    full = str(tmp_path / "full.csv")
    run_search(W, cs, hardware="h200-sxm", out=full, progress=None)

    part = str(tmp_path / "part.csv")
    seen = []

    def stop_after_five(row: dict) -> None:
        seen.append(row)
        if len(seen) == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_search(W, cs, hardware="h200-sxm", out=part, progress=None,
                   on_row=stop_after_five)
    assert len(read_rows(part)) == 5
    # A write torn by a kill: half a line at the end.
    with open(part, "a", encoding="utf-8") as f:
        f.write("mlp-4-64,32,4,1,")
    res = run_search(W, cs, hardware="h200-sxm", out=part, resume=True, progress=None)
    assert res.skipped == 5 and len(res.rows) == len(cs) - 5
    assert _strip(read_rows(part)) == _strip(read_rows(full))
    with open(part, newline="") as f:
        assert next(csv.reader(f)) == COLUMNS


def test_resume_refuses_rows_of_another_profile(tmp_path) -> None:
    """Rows record the profile simulated; resuming on another one (or for CUDA graphs when
    they were not) is refused in one line, and a file from before the column resumes."""
    from distir.analysis.hardware import load_hardware
    from distir.errors import ConfigError

    cs = _configs(2)
    out = str(tmp_path / "r.csv")
    run_search(W, cs[:2], hardware="h200-sxm", out=out, progress=None)
    assert {r["hardware"] for r in read_rows(out)} == {"h200-sxm"}
    host = dataclasses.replace(load_hardware("h200-sxm"), name="h200-host",
                               host_dispatch=(("*", 1e-5),), _host={})
    for other, says in (("h100-sxm", "on h100-sxm"), (host.for_cuda_graphs(),
                                                       "on h200-host+graph")):
        says = re.escape(f"simulated on h200-sxm, this search {says}")
        with pytest.raises(ConfigError, match=says):
            run_search(W, cs, hardware=other, out=out, resume=True, progress=None)
    res = run_search(W, cs, hardware="h200-sxm", out=out, resume=True, progress=None)
    assert res.skipped == 2
    # A file written before the column (and ``transform``): every other column, no check
    # of the profile; its rows were written by the builder tower (dtp before the passes).
    rows = read_rows(out)
    with open(out, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, COLUMNS[:COLUMNS.index("hardware")], extrasaction="ignore")
        w.writeheader()
        w.writerows(rows[:2])
    with pytest.raises(ConfigError, match="written by --transform tower"):
        run_search(W, cs, hardware="h100-sxm", out=out, resume=True, progress=None)
    assert run_search(W, cs, hardware="h100-sxm", out=out, resume=True, progress=None,
                      transform="tower").skipped == 2


def test_resume_refuses_a_file_of_another_format(tmp_path) -> None:
    from distir.errors import ConfigError

    p = tmp_path / "x.csv"
    p.write_text("a,b\n1,2\n")
    with pytest.raises(ConfigError, match="columns differ"):
        run_search(W, _configs(2), hardware="h200-sxm", out=str(p), resume=True, progress=None)


@pytest.mark.parametrize("hardware, devices", [("h100-sxm", 8), ("h100-sxm-ib", 16)])
def test_one_replica_simulated_for_all_gives_the_rows_of_every_replica(monkeypatch,
                                                                      hardware,
                                                                      devices) -> None:
    """The search simulates replica 0's program for all data-parallel replicas, and
    tensor-parallel rank 0's for all ranks (``dtp_replica``); with that turned off, every
    replica's and rank's program gives the same rows (on 16 devices of ``h100-sxm-ib``,
    two nodes of 8, some replicas span both)."""
    import distir.analysis.replicas as replicas

    gpt = workload("gpt2", n_layer=2, d_model=64, n_head=4, train=PRESETS[
        "gpt2-350m-train"].train)
    cs = list(enumerate_space(gpt.name, devices, [16], max_microbatches=4))
    assert sum(c.dp > 1 for c in cs) >= 8 and sum(c.tp > 1 for c in cs) >= 8
    one = run_search(gpt, cs, hardware=hardware, progress=None).rows
    monkeypatch.setattr(replicas, "replicas_run_alike", lambda *a: False)
    monkeypatch.setattr(replicas, "peers_run_alike", lambda *a: False)
    every = run_search(gpt, cs, hardware=hardware, progress=None).rows
    keys = ("status", "peak_memory_per_device", "ops", "reason")
    assert [[r[k] for k in keys] for r in one] == [[r[k] for k in keys] for r in every]
    # The same sums, associated otherwise (a call's summary applied, or its ops inlined).
    assert [float(r["latency_s"] or 0) for r in one] == pytest.approx(
        [float(r["latency_s"] or 0) for r in every], rel=1e-12)
    assert sum(r["status"] == "ok" and r["dp"] != "1" for r in one) >= 5


def test_parallel_workers_give_the_same_rows_in_the_same_order(tmp_path) -> None:
    cs = _configs(4)
    a = run_search(W, cs, hardware="h200-sxm", workers=1, progress=None).rows
    b = run_search(W, cs, hardware="h200-sxm", workers=2, progress=None).rows
    assert _strip(a) == _strip(b)


def test_presets_and_labels() -> None:
    assert set(PRESETS) == {"mlp-1b", "mlp-17b", "mlp-103b", "gpt2-350m", "gpt2-1.6b",
                            "gpt2-13b", "gpt2-175b", "gpt2-350m-train", "gpt2-1.6b-train",
                            "gpt2-13b-train", "gpt2-175b-train", "gpt3-175b",
                            "gpt3-175b-train"}
    assert workload("mlp-4-64").sizes == {"num_layers": 4, "width": 64}
    from distir.errors import ConfigError

    with pytest.raises(ConfigError, match="needs --preset or the sizes --num-layers"):
        workload("mlp")
    with pytest.raises(ConfigError, match="unknown model 'resnet'"):
        workload("resnet")


def test_spearman_and_accuracy() -> None:
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(0.9486832980505138)
    acc = accuracy([{"latency_s": 1.1, "measured_latency_s": 1.0, "peak_memory_bytes": 90,
                     "measured_peak_memory_bytes": 100},
                    {"latency_s": 2.0, "measured_latency_s": 2.5, "peak_memory_bytes": 100,
                     "measured_peak_memory_bytes": 100}])
    assert acc["spearman"] == pytest.approx(1.0)
    assert acc["median_latency_error"] == pytest.approx((0.1 + 0.2) / 2)
    assert acc["median_memory_error"] == pytest.approx(0.05)


def test_run_top_names_the_steps_paced_by_their_hosts(tmp_path, capsys, monkeypatch) -> None:
    """Eager runs measure each step's host cost; those paced by their hosts are named, with
    the advice to rank them replayed."""
    import grid_search.real as real

    out = str(tmp_path / "r.csv")
    cs = _configs(2, max_microbatches=2)
    run_search(W, cs, hardware="h200-sxm", out=out, progress=None)
    asked = {}

    def fake(workload, configs, **kw):
        asked.update(kw)
        for c, share in zip(configs, ("0.93", "0.40")):
            yield {**c.as_row(), "measured_status": "ok", "measured_latency_s": "0.01",
                   "measured_peak_memory_bytes": "", "measured_host_share": share}

    monkeypatch.setattr(real, "iter_measure", fake)
    real.run_top(read_rows(out), W, 2, out=out, backend="gloo", hardware="h200-sxm")
    assert asked["host_cost"] is True and asked["cuda_graph"] is False
    text = capsys.readouterr().out
    line = next(ln for ln in text.splitlines() if "paced by their hosts" in ln)
    assert "(93%)" in line and "(40%)" not in line and "--cuda-graph" in line
    rows = [r for r in read_rows(out) if r["measured_status"] == "ok"]
    assert sorted(r["measured_host_share"] for r in rows) == ["0.40", "0.93"]
    real.run_top(read_rows(out), W, 2, out=out, backend="gloo", hardware="h200-sxm",
                 cuda_graph=True)
    assert asked["host_cost"] is False  # replays: nothing to measure


def test_an_interrupted_run_top_keeps_what_it_measured(tmp_path, monkeypatch) -> None:
    """A search stopped while it measures (its time limit's SIGINT, a Ctrl-C) keeps every
    configuration measured before, in its CSV: the sealed studies lost two searches' rows
    so, their times only in the log."""
    import grid_search.real as real

    out = str(tmp_path / "r.csv")
    cs = _configs(2, max_microbatches=2)
    run_search(W, cs, hardware="h200-sxm", out=out, progress=None)

    def fake(workload, configs, **kw):
        first = list(configs)[0]
        yield {**first.as_row(), "measured_status": "ok", "measured_latency_s": "0.0123",
               "measured_peak_memory_bytes": "1024"}
        raise KeyboardInterrupt

    monkeypatch.setattr(real, "iter_measure", fake)
    with pytest.raises(KeyboardInterrupt):
        real.run_top(read_rows(out), W, 3, out=out, backend="gloo", hardware="h200-sxm")
    rows = read_rows(out)
    assert len(rows) == len(cs)
    assert [r["measured_latency_s"] for r in rows if r["measured_status"] == "ok"] == \
        ["0.0123"]


def test_run_top_adds_measured_columns(tmp_path, capsys) -> None:
    """The best configurations run for real (gloo on the CPU) and are written back."""
    from grid_search.real import MEASURED_COLUMNS, run_top

    out = str(tmp_path / "r.csv")
    cs = _configs(2, max_microbatches=2)
    run_search(W, cs, hardware="h200-sxm", out=out, progress=None)
    merged = run_top(read_rows(out), W, 1, out=out, backend="gloo", hardware="h200-sxm")
    rows = read_rows(out)
    assert len(rows) == len(cs) == len(merged)
    assert set(MEASURED_COLUMNS) <= set(rows[0])
    measured = [r for r in rows if r["measured_status"]]
    assert len(measured) == 1 and measured[0]["measured_status"] == "ok"
    assert float(measured[0]["measured_latency_s"]) > 0
    text = capsys.readouterr().out
    assert "Spearman" in text
    # CPU times against a GPU profile: said beside the figures, not silently compared.
    assert "warning: the runs were measured on cpu" in text
    assert "the profile h200-sxm does not describe" in text


def test_measured_runs_come_before_their_profiled_steps(tmp_path, monkeypatch) -> None:
    """With ``profile``, every configuration of a session is timed before any is profiled
    (a process that ran the profiler times later steps differently), and each one's traces
    are written."""
    from distir.backend import launch
    from grid_search.real import iter_measure

    calls: list[bool] = []
    run = launch.Session.run

    def spy(self, fn, *a, **kw):  # noqa: ANN001, ANN202 - records profiled or not
        calls.append(kw.get("profile") is not None)
        return run(self, fn, *a, **kw)

    monkeypatch.setattr(launch.Session, "run", spy)
    cs = [c for c in _configs(2, max_microbatches=2) if c.devices == 2][:2]
    rows = list(iter_measure(W, cs, backend="gloo", steps=1, warmup=0, progress=None,
                             profile=str(tmp_path / "p"), profile_marks=False))
    assert [r["measured_status"] for r in rows] == ["ok", "ok"]
    assert calls == [False, False, True, True]
    for c in cs:
        d = tmp_path / "p" / f"b{c.batch_size}_d{c.dp}_t{c.tp}_p{c.pp}_k{c.microbatches}"
        assert sorted(x.name for x in d.iterdir()) == ["rank0.json", "rank1.json"]


def test_profile_mismatch_is_only_for_other_devices() -> None:
    from grid_search.real import profile_mismatch

    assert profile_mismatch("h100-sxm", ["NVIDIA H100 80GB HBM3"]) is None
    assert profile_mismatch("h100-sxm", []) is None
    msg = profile_mismatch("h100-sxm", ["cpu (x86_64)", "cpu (x86_64)"])
    assert msg is not None and msg.count("cpu (x86_64)") == 1 and "\n" not in msg


@pytest.mark.parametrize("hw, expected", [
    ("tpu-v9", r"^error: unknown hardware profile 'tpu-v9'; available: .*h100-sxm"),
    ("BAD", r"^\S*bad\.json:2:13: error: invalid JSON in hardware profile: "),
])
def test_grid_search_rejects_a_bad_profile_at_once(tmp_path, capsys, hw, expected) -> None:
    """An unknown or malformed profile stops the command before anything is simulated, with
    the same one line as `distir simulate` (no doubled "error:"), and no CSV is written."""
    import re

    from distir.cli import main

    if hw == "BAD":
        hw = str(tmp_path / "bad.json")
        (tmp_path / "bad.json").write_text('{\n  "name": 3,,\n}', encoding="utf-8")
    out = tmp_path / "r.csv"
    rc = main(["grid-search", "--model", "mlp-1b", "--devices", "2", "--hardware", hw,
               "--workers", "1", "-o", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and re.search(expected, err[0]), err
    assert err[0].count("error:") == 1
    assert not out.exists()
    rc = main(["simulate", "examples/mlp_step.dir", "--hardware", hw])
    assert rc == 1 and capsys.readouterr().err.strip() == err[0]


def test_summary_blames_memory_only_when_memory_stopped_everything() -> None:
    failed = [{"status": "error", "reason": "profile x: broken", "fits": ""}] * 3
    text = summarize(failed)
    assert "fits in memory" not in text.splitlines()[-1]
    assert "3 failed" in text and "profile x: broken" in text
    oom = [{"status": "oom", "reason": "", "fits": "False"}] * 2
    assert "no configuration fits in memory" in summarize(oom)


def test_grid_search_for_cuda_graphs(tmp_path, capsys, host_profile) -> None:
    """``--cuda-graph`` searches for steps replayed as graphs: the profile without host
    dispatch, every configuration priced as on a profile that never had it."""
    from distir.cli import main

    prof = host_profile
    lat = {}
    for name, argv in (("graph", ["--hardware", str(prof), "--cuda-graph"]),
                       ("eager", ["--hardware", str(prof)]), ("plain", [])):
        out = tmp_path / f"{name}.csv"
        assert main(["grid-search", "--model", "mlp-1b", "--devices", "2", "--workers", "1",
                     "-o", str(out), *argv]) == 0
        lat[name] = {tuple(r[c] for c in ("batch_size", "dp", "tp", "pp", "microbatches")):
                     float(r["latency_s"]) for r in read_rows(str(out)) if r["latency_s"]}
        printed = capsys.readouterr().out
        assert ("(CUDA graphs)" in printed) == (name == "graph")
    assert lat["graph"].keys() == lat["plain"].keys() and lat["graph"]
    for k, t in lat["graph"].items():
        assert t == pytest.approx(lat["plain"][k])
        assert lat["eager"][k] > t


def test_run_top_keeps_why_a_run_failed(tmp_path, capsys, monkeypatch) -> None:
    """A run that fails is a row with its reason (``measured_reason``) and a printed line,
    not an error without one."""
    from distir.backend import Session
    from distir.errors import BackendError
    from grid_search.real import run_top

    def fail(self, fn, **kw):  # noqa: ANN001, ANN003, ANN202 - Session.run's stand-in
        raise BackendError("@main failed on rank 1: out of luck")

    monkeypatch.setattr(Session, "run", fail)
    out = str(tmp_path / "r.csv")
    run_search(W, _configs(2, max_microbatches=2), hardware="h200-sxm", out=out,
               progress=None)
    run_top(read_rows(out), W, 1, out=out, backend="gloo", hardware="h200-sxm")
    (row,) = [r for r in read_rows(out) if r["measured_status"]]
    assert row["measured_status"] == "error"
    assert row["measured_reason"] == "@main failed on rank 1: out of luck"
    text = capsys.readouterr().out
    assert "not measured: D2/T1/P1/K1 batch 32: error: @main failed on rank 1" in text
