"""dtp's configurations as seeded placements (``spmd/seeds.py``) and their place among
``optimize``'s candidates: on every mesh the search keeps them, so it never returns a plan
slower than them."""

from __future__ import annotations

from functools import cache

import numpy as np

import distir
from distir.analysis.simulator import simulate
from distir.transforms.spmd import Mesh, R, Shard, comm_breakdown, lower, optimize
from distir.transforms.spmd.seeds import dtp_plans, dtp_seeds
from distir.transforms.tower import dtp  # the reference the passes are checked against


@cache
def _mlp() -> distir.Function:
    return distir.models.mlp(batch_size=64, input_dim=64, hidden_dim=64, output_dim=64,
                             num_layers=4)


def test_seeds_are_dtp_on_the_mlp() -> None:
    fn = _mlp()
    got = {}
    for mesh in (Mesh.of(4), Mesh.of(2, 2)):
        for label, a in dtp_plans(fn, mesh):
            got[label] = a
            parts = {p[0]: int(p[1:]) for p in label.split()}
            ref = dtp(fn, dp=parts.get("D", 1), tp=parts.get("T", 1))
            assert comm_breakdown(lower(a)) == comm_breakdown(ref), label
    assert sorted(got) == ["D2 T2", "D4", "T4"]
    names = [p.name for p in fn.params]
    s = dict(zip(names, got["D2 T2"].params, strict=True))
    assert s["x"] == (Shard(0), R) and s["w0"] == (R, Shard(1)) and s["w1"] == (R, Shard(0))


def test_seeds_split_attention_by_heads() -> None:
    from distir.models.gpt2 import GPT2Config

    cfg = GPT2Config(n_layer=1, d_model=16, n_head=2, vocab_size=32, seq_len=8, batch_size=4)
    fn = cfg.build()
    seeds = dtp_seeds(fn, Mesh.of(2), None, 0)
    by_name = {fn.params[n].name: s for n, s in seeds.items()}
    assert by_name["h.0.attn.c_attn.weight"] == (Shard(1, groups=3),)
    assert by_name["h.0.mlp.c_fc.weight"] == (Shard(1),)
    (label, a), = [p for p in dtp_plans(fn, Mesh.of(2)) if p[0] == "T2"]
    ins = list(cfg.example_inputs())
    want = distir.execute(fn, ins)
    got = distir.execute(lower(a, self_contained=True), ins)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_optimize_keeps_the_seeded_plans() -> None:
    """A starved search (one state) still returns a plan no slower than dtp's plans on
    each mesh; the seeded plans are among the candidates, named by configuration."""
    fn = _mlp()
    r = optimize(fn, 4, beam=1, max_states=1, top_k=1)
    for mesh in (Mesh.of(4), Mesh.of(2, 2)):
        for label, a in dtp_plans(fn, mesh):
            # kept under its name, unless the search found the very same plan
            assert any(c.origin == label or c.origin == "search"
                       and (c.assignment.params, c.assignment.reads) == (a.params, a.reads)
                       for c in r.candidates if c.assignment.mesh == mesh), label
    seeded = [c for c in r.candidates if c.origin != "search"]
    assert seeded and all(np.isnan(c.estimate_s) for c in seeded)
    assert r.simulation.latency_s <= min(c.simulated_s for c in r.candidates if c.fits)
    for d, t in ((4, 1), (1, 4)):
        assert r.simulation.latency_s <= simulate(dtp(fn, dp=d, tp=t), "h100-sxm").latency_s
    off = optimize(fn, 4, beam=1, max_states=1, top_k=1, seeded=False)
    assert {c.origin for c in off.candidates} == {"search"}


def test_budget_leaves_the_seeded_plans() -> None:
    r = optimize(_mlp(), 4, budget_s=1e-9)
    assert {c.origin for c in r.candidates} <= {"D4", "T4", "D2 T2"}
    notes = [m.get("search", "") for m in r.stats["meshes"]]
    assert all("budget" in n for n in notes), notes
