"""The synchronisation search (DisCo's Algorithm 1 over bucketings) and ``distir
sync-search``: the best is never slower than a builder, re-simulates to its reported time,
and the stopping rules hold."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import distir
from distir.cli import main
from distir.errors import ConfigError
from distir.ir import Function, dumps
from distir.models.mlp import mlp
from distir.transforms import dtp, synchronize
from grid_search.sync_search import bucketing_plan, builder_strategies, describe, sync_search


def _step(dp: int = 4, layers: int = 6, width: int = 32) -> Function:
    return dtp(mlp(batch_size=4 * dp, input_dim=width, hidden_dim=width, output_dim=8,
                   num_layers=layers), dp=dp)


def test_best_is_no_slower_than_any_builder_and_resimulates() -> None:
    fn = _step()
    res = sync_search(fn, "h200-sxm", patience=30)
    assert set(res.builders) == set(builder_strategies(6))
    assert all(res.best_s <= t for t in res.builders.values())
    again = distir.simulate(synchronize(fn, res.strategy()), hardware="h200-sxm")
    assert again.latency_s == pytest.approx(res.best_s)
    assert res.evaluated >= len(res.builders) and res.steps >= 1
    # Tiny gradients are latency-bound: fusing beats one all-reduce each.
    assert res.best_s < res.builders["per-gradient"]
    assert res.gain_over("per-gradient") > 0
    d = res.to_dict()
    json.dumps(d)
    assert d["buckets"] is None or sorted(i for b in d["buckets"] for i in b) == list(range(6))


def test_search_improves_on_its_seeds_where_it_can() -> None:
    # Many gradients, few replicas: the search explores beyond the builders' bucketings.
    fn = _step(dp=2, layers=12, width=64)
    res = sync_search(fn, "h200-sxm", patience=15, seed=1)
    seeds = {k: v for k, v in res.builders.items() if not k.startswith(("ps", "zero"))}
    assert res.best_s <= min(seeds.values())
    assert res.evaluated > len(res.builders) + 2  # it simulated neighbours, not just seeds


def test_stopping_rules() -> None:
    fn = _step(dp=2, layers=10)
    capped = sync_search(fn, "h200-sxm", max_evals=16)
    assert capped.stopped == "16 simulations"
    assert capped.evaluated <= 16 + 10  # the last step simulates at most beta more
    patient = sync_search(fn, "h200-sxm", patience=1, beta=2)
    assert patient.stopped in ("1 steps without improvement", "queue empty")
    with pytest.raises(ConfigError, match="alpha >= 1"):
        sync_search(fn, alpha=0.9)


def test_bucketing_plan_and_compression() -> None:
    plan = bucketing_plan((False, True, False))
    assert [p.group for p in plan] == [0, 0, 1, 1]
    fn = _step(dp=2, layers=4)
    res = sync_search(fn, "h200-sxm", patience=5, compress="bf16")
    assert all(p.compress == "bf16" for p in res.best)
    assert "best is faster by" in describe(res)


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "dp.dir"
    path.write_text(dumps(_step(dp=2, layers=4)), encoding="utf-8")
    out = tmp_path / "strategy.json"
    assert main(["sync-search", str(path), "--patience", "5", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    for name in ("per-gradient", "ddp", "merge-all", "chunk-2", "ps", "zero-2"):
        assert name in text
    strategy = json.loads(out.read_text(encoding="utf-8"))
    assert len(strategy["variables"]) == 4
    assert synchronize(distir.load(str(path)), strategy).ops
    assert main(["sync-search", str(path), "--patience", "5", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["best_s"] <= min(doc["builders_s"].values())
    seq = tmp_path / "seq.dir"
    seq.write_text(dumps(mlp(batch_size=8, input_dim=8, hidden_dim=8, output_dim=4,
                             num_layers=3)), encoding="utf-8")
    assert main(["sync-search", str(seq), "--patience", "3"]) == 1
    assert "pass --dp D" in capsys.readouterr().err
    assert main(["sync-search", str(seq), "--dp", "2", "--patience", "3", "--json"]) == 0


def test_guided_sampling_over_per_variable_strategies() -> None:
    fn = _step(dp=4, layers=6, width=64)
    base = sync_search(fn, "t4-4x4-50gbe", patience=5, max_evals=40)
    res = sync_search(fn, "t4-4x4-50gbe", patience=5, max_evals=40, samples=60, seed=3)
    again = sync_search(fn, "t4-4x4-50gbe", patience=5, max_evals=40, samples=60, seed=3)
    assert res.best == again.best and res.best_s == again.best_s  # seeded
    assert res.best_s <= base.best_s and res.params["samples"] == 60
    assert all(res.best_s <= t for t in res.builders.values())
    assert "partitioned-ps" in res.builders
    again_s = distir.simulate(synchronize(fn, res.strategy()), hardware="t4-4x4-50gbe")
    assert again_s.latency_s == pytest.approx(res.best_s)
    with pytest.raises(ConfigError, match="samples >= 0"):
        sync_search(fn, "h200-sxm", samples=-1)


def test_hierarchical_builder_where_replicas_span_nodes() -> None:
    fn = _step(dp=8, layers=4)  # 8 replicas: two nodes of t4-4x4-50gbe, one of h200-sxm
    spans = sync_search(fn, "t4-4x4-50gbe", patience=3, max_evals=30)
    assert "hierarchical" in spans.builders
    one = sync_search(fn, "h200-sxm", patience=3, max_evals=30)
    assert "hierarchical" not in one.builders


def test_grid_search_with_searched_synchronisation() -> None:
    from grid_search import run_search, workload
    from grid_search.space import enumerate_space

    w = workload("mlp", num_layers=4, width=64)
    configs = [c for c in enumerate_space(w.name, 4, [64]) if c.dp > 1]
    plain = run_search(w, configs, hardware="h200-sxm", progress=None).rows
    synced = run_search(w, configs, hardware="h200-sxm", progress=None, sync="searched").rows
    assert len(plain) == len(synced) > 0
    assert [a["status"] for a in plain] == [b["status"] for b in synced]
    for a, b in [(a, b) for a, b in zip(plain, synced) if a["status"] == "ok"]:
        assert b["reason"].startswith("sync: ")
        assert "not searched" not in b["reason"]
        assert float(b["latency_s"]) <= float(a["latency_s"]) * (1 + 1e-9)
    with pytest.raises(ConfigError, match="sync must be"):
        run_search(w, configs, hardware="h200-sxm", progress=None, sync="fast")


def test_the_top_rows_run_the_searched_synchronisation() -> None:
    """``--sync searched --run-top``: the rows measured run the program the search
    simulated, its gradients synchronised as chosen (CPU, gloo)."""
    import dataclasses

    from grid_search import run_search, workload
    from grid_search.real import iter_measure, program_fingerprint
    from grid_search.space import Config

    w = workload("mlp", num_layers=4, width=64)
    cfg = Config(w.name, 64, 2, 1, 1, 1, "1f1b")
    row = run_search(w, [cfg], hardware="h200-sxm", progress=None, sync="searched").rows[0]
    assert row["status"] == "ok" and row["reason"].startswith("sync: ")
    searched = dataclasses.replace(w, sync="searched")
    an = searched.analyze(64, hardware="h200-sxm")
    plain = searched.program(an, cfg)
    synced, note = searched.synchronized(plain, cfg, "h200-sxm")
    assert note == row["reason"] and program_fingerprint(synced) != program_fingerprint(plain)
    (m,) = iter_measure(searched, [cfg], backend="gloo", steps=1, warmup=1, progress=None,
                        hardware="h200-sxm")
    assert m["measured_status"] == "ok" and m["sync"] == note
    assert m["program_fingerprint"] == program_fingerprint(synced)
