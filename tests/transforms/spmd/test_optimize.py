"""``optimize``: the per-op search at scale (segments, a cache per structure), against
``dtp``'s D/T configurations and the reference executor."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

import distir
from distir.analysis import random_inputs
from distir.analysis.simulator import simulate
from distir.errors import ConfigError
from distir.transforms.program import Program
from distir.transforms.spmd import Mesh, Shard, comm_breakdown, lower, optimize
from distir.transforms.spmd.segments import decompose
from distir.transforms.tower import dtp  # the reference the passes are checked against


@cache
def _mlp(layers: int = 4) -> distir.Function:
    return distir.models.mlp(batch_size=64, input_dim=128, hidden_dim=128, output_dim=128,
                             num_layers=layers)


def test_layers_share_one_structure() -> None:
    """A training step is cut per layer (activation forward, gradient back; a weight whose
    product and gradient fall on either side of a cut crosses it too), and the middle
    layers have one signature."""
    prog = Program(_mlp(6))
    dec = decompose(prog)
    assert all(len([v for v in b if v not in prog.param_set]) == 2 for b in dec.boundaries)
    sigs = [s.signature for s in dec.segments]
    assert len(set(sigs)) < len(sigs) - 3  # repeated layers share
    ops = sorted(i for s in dec.segments for i in s.ops)
    assert len(ops) == len(set(ops))


@pytest.mark.parametrize("devices", [2, 4])
def test_mlp_at_least_as_fast_as_dtp(devices: int) -> None:
    """Sizes where splitting pays (a narrower MLP runs fastest unsplit, which the search
    also finds)."""
    fn = distir.models.mlp(batch_size=1024, input_dim=2048, hidden_dim=2048,
                           output_dim=2048, num_layers=4)
    r = optimize(fn, devices, "h100-sxm")
    best = min(simulate(dtp(fn, dp=d, tp=devices // d), "h100-sxm").latency_s
               for d in (1, 2, 4) if devices % d == 0)
    assert r.simulation.latency_s <= best * 1.0001
    assert r.simulation.latency_s < 0.75 * simulate(fn, "h100-sxm").latency_s
    assert r.candidates[0].fits
    assert r.stats["meshes"][0]["segment_searches"] < 200  # cached across layers


def test_found_plan_equals_sequential() -> None:
    fn = _mlp(3)
    r = optimize(fn, 2, "h100-sxm")
    ins = random_inputs(fn, seed=0)
    want = distir.execute(fn, list(ins))
    got = distir.execute(lower(r.assignment, self_contained=True), list(ins))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_deep_mlp_is_fast() -> None:
    """16 layers cost about one layer's search (search_small needed 240 s for 8)."""
    r = optimize(distir.models.mlp(64, 64, 64, 64, num_layers=16), 2, "h100-sxm")
    assert r.seconds < 20
    assert r.stats["meshes"][0]["structures"] <= 6


def test_public_and_errors() -> None:
    assert distir.optimize is optimize
    with pytest.raises(ConfigError, match="has 2 devices, not 4"):
        optimize(_mlp(), 4, meshes=[Mesh.of(2)])


def _gpt2_step(d: int, batch: int, seq: int, layers: int = 2) -> distir.Function:
    from distir.models.gpt2 import GPT2Config
    from distir.transforms.training import training_step

    cfg = GPT2Config(n_layer=layers, d_model=d, n_head=16, vocab_size=64, seq_len=seq,
                     batch_size=batch)
    fn = cfg.build()
    names = [p.name for p in fn.params if p.name != "input_ids"]
    return training_step(fn, loss="cross_entropy", optimizer="sgd", lr=0.1, wrt=names,
                         reduction="mean")


def test_gpt2_training_rediscovers_megatron() -> None:
    """Small batch, wide layers, 2 devices: QKV and fc split by columns, both projections
    by rows, their products partial (Megatron's f and g: one all-reduce each way per block),
    and at least as fast as dtp's data and tensor parallelism. (The search alone: seeded,
    dtp's T2 with attention split by heads wins here.)"""
    step = _gpt2_step(2048, 2, 128)
    r = optimize(step, 2, beam=8, max_states=200, seeded=False)
    spec = dict(zip((p.name for p in r.assignment.prog.fn.params), r.assignment.params,
                    strict=True))
    for i in range(2):
        # by columns, plainly or by heads (3 interleaved groups) where those are candidates
        assert spec[f"h.{i}.attn.c_attn.weight"] in ((Shard(1),), (Shard(1, groups=3),))
        assert spec[f"h.{i}.mlp.c_fc.weight"] == (Shard(1),)
        assert spec[f"h.{i}.attn.c_proj.weight"] == (Shard(0),)
        assert spec[f"h.{i}.mlp.c_proj.weight"] == (Shard(0),)
    reduces = sum(n for (op, shape, _), n in comm_breakdown(r.program).items()
                  if op == "MPIAllreduce" and shape == (2, 128, 2048))
    assert reduces == 8  # 2 layers x 2 blocks x (forward g, backward f)
    best = min(simulate(dtp(step, dp=2), "h100-sxm").latency_s,
               simulate(dtp(step, tp=2), "h100-sxm").latency_s)
    assert r.simulation.latency_s <= best


def test_gpt2_training_plan_equals_sequential() -> None:
    step = _gpt2_step(256, 2, 16, layers=1)
    r = optimize(step, 2, beam=8, max_states=200)
    ins = random_inputs(step, seed=0)
    want = distir.execute(step, list(ins))
    got = distir.execute(lower(r.assignment, self_contained=True), list(ins))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_cli(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    import os

    from distir.cli import main

    out = os.path.join(str(tmp_path), "plan.dir")
    rc = main(["optimize", "--model", "mlp", "--num-layers", "2", "--width", "256",
               "--batch-size", "256", "--devices", "2", "-o", out])
    assert rc == 0
    text = capsys.readouterr().out
    assert "best" in text and "mesh" in text
    plan = distir.load(out).entry
    assert {p.type.device for p in plan.params} == {0, 1}
    assert main(["optimize", "--model", "nope", "--devices", "2"]) == 1
    assert "unknown model 'nope'" in capsys.readouterr().err
    assert main(["optimize", "--model", "mlp-1b", "--devices", "8", "--budget", "0"]) == 1
    assert "--budget 0.0: give a positive number" in capsys.readouterr().err


def test_cli_substitutions(capsys: pytest.CaptureFixture[str]) -> None:
    """``--substitutions`` searches the step's rewrites too and says which it applied; an
    unknown rule is one line naming the known ones."""
    from distir.cli import main

    mlp = ["optimize", "--model", "mlp", "--num-layers", "2", "--width", "128",
           "--batch-size", "64", "--devices", "2"]
    assert main([*mlp, "--substitutions", "split_columns", "--depth", "1",
                 "--budget", "30"]) == 0
    text = capsys.readouterr().out
    assert "substitutions: " in text and "rewritten programs scored" in text
    assert main([*mlp, "--substitutions", "nope"]) == 1
    err = capsys.readouterr().err.strip()
    assert "unknown substitution 'nope'" in err and "fuse_products" in err
    assert "\n" not in err
