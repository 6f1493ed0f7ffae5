"""Grouped shard candidates (``Shard(d, groups=g)``): found from the rules alone, and used
by the searches to split GPT-2's attention by heads (Megatron's plan), with the fused
projection's bias gradient kept split through its ``ReduceSum`` and ``Reshape``."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

import distir
from distir.analysis import random_inputs
from distir.analysis.simulator import simulate
from distir.models.gpt2 import GPT2Config
from distir.transforms.spmd import (
    Mesh,
    R,
    Shard,
    comm_breakdown,
    lower,
    optimize,
    search_small,
)
from distir.transforms.spmd.assignment import LayoutAssignment
from distir.transforms.spmd.grouped import grouped_shards
from distir.transforms.spmd.propagate import program_of
from distir.transforms.spmd.rules import NotLocal, OpRules
from distir.transforms.tower import dtp  # the reference the passes are checked against
from distir.transforms.training import training_step


def _step(cfg: GPT2Config) -> distir.Function:
    fn = cfg.build()
    names = [p.name for p in fn.params if p.name != "input_ids"]
    return training_step(fn, loss="cross_entropy", optimizer="sgd", lr=0.1, wrt=names,
                         reduction="mean")


TINY = GPT2Config(n_layer=1, d_model=16, n_head=2, vocab_size=32, seq_len=8, batch_size=4)


@cache
def _tiny_step() -> distir.Function:
    return _step(TINY)


def test_grouped_candidates_follow_the_fused_projection_only() -> None:
    """The Split into q, k, v seeds 3 groups on qkv; the closure reaches the product, the
    bias, the weight and its update, and backward the Concat of q, k, v's gradients, its
    ReduceSum and Reshape (the bias gradient) and the weight gradient; nothing else."""
    step = _tiny_step()
    prog = program_of(step)
    facts = grouped_shards(prog, OpRules(prog, Mesh.of(2)))
    d3 = 3 * TINY.d_model
    by_shape: dict[tuple[int, ...], set] = {}
    for v, s in facts.items():
        assert s == {(len(prog.shape(v)) - 1, 3)}  # the last axis, 3 groups
        by_shape.setdefault(prog.shape(v), set()).add(v)
    b, t = TINY.batch_size, TINY.seq_len
    assert set(by_shape) == {(b, t, d3), (1, 1, d3), (d3,), (TINY.d_model, d3)}
    assert len(by_shape[(b, t, d3)]) == 3  # the product, qkv, and qkv's gradient
    assert len(by_shape[(d3,)]) == 2  # the bias and its gradient
    assert len(by_shape[(TINY.d_model, d3)]) == 2  # the weight and its gradient
    names = {v.name for v in facts}
    assert not any(n and "mlp" in n for n in names)


def test_elementwise_refuses_mixed_groups() -> None:
    """An update of a weight split by plain columns with a gradient split in 3 groups
    would mix different columns: refused."""
    step = _tiny_step()
    prog = program_of(step)
    rules = OpRules(prog, Mesh.of(2))
    sgd = next(op for op in prog.ops if op.op_type == "SGDOptimizer"
               and prog.shape(op.inputs[0]) == (TINY.d_model, 3 * TINY.d_model))
    assert rules.apply(sgd, ((Shard(1, 3),), (Shard(1, 3),))).outs == ((Shard(1, 3),),)
    with pytest.raises(NotLocal, match="different groups"):
        rules.apply(sgd, ((Shard(1),), (Shard(1, 3),)))


def test_search_small_splits_attention_by_heads() -> None:
    """One GPT-2 layer's inference, the batch of one arriving whole: the fewest elements
    split the fused projection by heads, and the plan computes the sequential logits."""
    cfg = GPT2Config(n_layer=1, d_model=16, n_head=2, vocab_size=32, seq_len=8, batch_size=1)
    fn = cfg.build()
    r = search_small(fn, Mesh.of(2), fixed={"input_ids": (R,)})
    spec = dict(zip((p.name for p in fn.params), r.assignment.params, strict=True))
    assert spec["h.0.attn.c_attn.weight"] == (Shard(1, groups=3),)
    assert spec["h.0.attn.c_attn.bias"] == (Shard(0, groups=3),)
    ins = cfg.example_inputs()
    for g, w in zip(distir.execute(lower(r.assignment, self_contained=True), list(ins)),
                    distir.execute(fn, list(ins)), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


WIDE = GPT2Config(n_layer=1, d_model=2048, n_head=16, vocab_size=64, seq_len=64,
                  batch_size=1)
"""Wide enough that tensor parallelism pays at 2 devices (batch 1: data parallelism cannot
split much), small enough to search in a few seconds. The searches run unseeded, so the
plan is the segment search's own, not one of dtp's seeded plans."""


@cache
def _wide() -> tuple[distir.Function, object]:
    step = _step(WIDE)
    return step, optimize(step, 2, beam=8, max_states=200, seeded=False)


def test_optimize_rediscovers_megatron_attention_by_heads() -> None:
    """QKV split by heads, its bias and bias gradient alike, c_proj by rows, c_fc by
    columns: Megatron's four all-reduces of the layer's activations, no all-gather of q,
    k, v or of the bias gradient."""
    step, r = _wide()
    a = r.assignment  # type: ignore[attr-defined]
    spec = dict(zip((p.name for p in a.prog.fn.params), a.params, strict=True))
    assert spec["h.0.attn.c_attn.weight"] == (Shard(1, groups=3),)
    assert spec["h.0.attn.c_attn.bias"] == (Shard(0, groups=3),)
    assert spec["h.0.attn.c_proj.weight"] == (Shard(0),)
    assert spec["h.0.mlp.c_fc.weight"] == (Shard(1),)
    assert spec["h.0.mlp.c_proj.weight"] == (Shard(0),)
    act = (WIDE.batch_size, WIDE.seq_len, WIDE.d_model)
    comm = comm_breakdown(r.program)  # type: ignore[attr-defined]
    assert comm.pop(("MPIAllreduce", act, 2)) == 4
    # besides them at most a vocabulary-parallel cross entropy's (B, S, 1) maxima and sums
    assert all(k[1] == act[:2] + (1,) for k in comm)


def test_optimize_with_groups_is_faster(monkeypatch: pytest.MonkeyPatch) -> None:
    """Faster than the plan found without grouped candidates (at these sizes it leaves
    attention unsplit: plain columns would gather q, k and v) and at least as fast as
    dtp's tensor parallelism."""
    import sys

    step, r = _wide()
    got = r.simulation.latency_s  # type: ignore[attr-defined]
    segsearch = sys.modules["distir.transforms.spmd.segsearch"]
    monkeypatch.setattr(segsearch, "grouped_shards", lambda prog, rules: {})
    old = optimize(step, 2, beam=8, max_states=200, seeded=False)
    spec = dict(zip((p.name for p in old.assignment.prog.fn.params), old.assignment.params,
                    strict=True))
    assert spec["h.0.attn.c_attn.weight"] != (Shard(1, groups=3),)
    assert got < old.simulation.latency_s
    assert got <= simulate(dtp(step, tp=2), "h100-sxm").latency_s


def test_optimize_plan_equals_sequential() -> None:
    """The plan found on the wide step, op for op on the same step at tiny sizes (the
    reference executor takes 13 s on the wide one), computes the sequential step."""
    _, r = _wide()
    wide = r.assignment  # type: ignore[attr-defined]
    step = _step(GPT2Config(n_layer=1, d_model=32, n_head=2, vocab_size=64, seq_len=64,
                            batch_size=1))
    prog = program_of(step)
    assert [op.op_type for op in prog.ops] == [op.op_type for op in wide.prog.ops]
    rules = OpRules(prog, wide.mesh)
    outs = tuple(None if rd is None else wide.outcomes[i] if not rd
                 else rules.apply(prog.ops[i], rd) for i, rd in enumerate(wide.reads))
    a = LayoutAssignment(prog, wide.mesh, wide.params, wide.reads, outs)
    a.check()
    ins = random_inputs(step, seed=0)
    want = distir.execute(step, list(ins))
    got = distir.execute(lower(a, self_contained=True), list(ins))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
