"""SPMD layouts on tiny GPT-2 layers (the builder's inference step, 2 layers): the batch
split, Megatron's MLP block, and both on a 2-D mesh, against the reference executor."""

from __future__ import annotations

from functools import cache

import numpy as np

import distir
from distir.models.gpt2 import GPT2Config
from distir.transforms.spmd import (
    Mesh,
    R,
    Shard,
    comm_breakdown,
    communicated_elements,
    lower,
    propagate,
)
from distir.transforms.tower import dtp  # the reference the passes are checked against

CFG = GPT2Config(n_layer=2, d_model=16, n_head=2, vocab_size=32, seq_len=8, batch_size=4)


@cache
def _model() -> tuple[distir.Function, tuple, tuple]:
    fn = CFG.build()
    ins = tuple(CFG.example_inputs())
    return fn, ins, tuple(distir.execute(fn, list(ins)))


def _same(out: distir.Function) -> None:
    _, ins, want = _model()
    got = distir.execute(out, list(ins))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


MLP_TP = {f"h.{i}.mlp.c_fc.weight": (Shard(1),) for i in range(CFG.n_layer)}


def test_batch_split() -> None:
    fn, _, _ = _model()
    a = propagate(fn, Mesh.of(2), {"input_ids": (Shard(0),)})
    logits = fn.returns[0]
    assert a.spec(logits) == (Shard(0),)
    _same(lower(a, self_contained=True))
    assert comm_breakdown(lower(a)) == comm_breakdown(dtp(fn, dp=2))  # none: inference


def test_megatron_mlp_block() -> None:
    """c_fc split by columns; the rules split its bias and c_proj by rows (local slices),
    and one all-reduce per layer sums the row-parallel product before its bias."""
    fn, _, _ = _model()
    a = propagate(fn, Mesh.of(2), MLP_TP)
    _same(lower(a, self_contained=True))
    shape = (CFG.batch_size, CFG.seq_len, CFG.d_model)
    assert comm_breakdown(lower(a)) == {("MPIAllreduce", shape, 2): CFG.n_layer}


def test_batch_and_mlp_block_on_2d_mesh() -> None:
    fn, _, _ = _model()
    seeds = {"input_ids": (Shard(0), R)} | {k: (R, v[0]) for k, v in MLP_TP.items()}
    a = propagate(fn, Mesh.of(2, 2), seeds)
    _same(lower(a, self_contained=True))
    shape = (CFG.batch_size // 2, CFG.seq_len, CFG.d_model)
    assert comm_breakdown(lower(a)) == {("MPIAllreduce", shape, 2): 2 * CFG.n_layer}


@cache
def _step() -> tuple[distir.Function, tuple, tuple]:
    from distir.analysis import random_inputs
    from distir.transforms.training import training_step

    fn, _, _ = _model()
    names = [p.name for p in fn.params if p.name != "input_ids"]
    step = training_step(fn, loss="cross_entropy", optimizer="sgd", lr=0.1, wrt=names,
                         reduction="mean")
    ins = tuple(random_inputs(step, seed=0))
    return step, ins, tuple(distir.execute(step, list(ins)))


def _same_step(out: distir.Function) -> None:
    _, ins, want = _step()
    for g, w in zip(distir.execute(out, list(ins)), want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_training_step_batch_split() -> None:
    """The mean loss is scaled per shard; every weight gradient is all-reduced."""
    step, _, _ = _step()
    target = step.params[-1].name
    a = propagate(step, Mesh.of(2), {"input_ids": (Shard(0),), target: (Shard(0),)})
    _same_step(lower(a, self_contained=True))
    ours, ref = lower(a), dtp(step, dp=2)
    def reduces(f: distir.Function) -> int:
        return sum(n for k, n in comm_breakdown(f).items() if k[0] == "MPIAllreduce")

    # wte's gradient: each shard adds its own rows into zeros (a partial sum), then one
    # all-reduce of the (vocabulary, d) table, as dtp does; no rows or ids are gathered
    wte = (CFG.vocab_size, CFG.d_model)
    assert comm_breakdown(ours)[("MPIAllreduce", wte, 2)] == 1
    assert not any(k[0] == "MPIAllgather" for k in comm_breakdown(ours))
    assert reduces(ours) <= reduces(ref)
    assert communicated_elements(ours) <= communicated_elements(ref)


def test_training_step_megatron_mlp_block() -> None:
    """Megatron's f and g: one all-reduce per MLP block forward and one backward."""
    step, _, _ = _step()
    a = propagate(step, Mesh.of(2), MLP_TP)
    _same_step(lower(a, self_contained=True))
    shape = (CFG.batch_size, CFG.seq_len, CFG.d_model)
    assert comm_breakdown(lower(a)) == {("MPIAllreduce", shape, 2): 2 * CFG.n_layer}


MEGATRON = MLP_TP | {f"h.{i}.attn.c_attn.weight": (Shard(1, groups=3),)
                     for i in range(CFG.n_layer)}


def test_megatron_attention_and_mlp_is_dtp_tp() -> None:
    """The fused QKV projection split by heads (3 interleaved groups): the rules split its
    bias alike, each head's q, k, v stay on one device, c_proj is row-split; the program
    communicates exactly as ``dtp(fn, tp=2)``."""
    fn, _, _ = _model()
    a = propagate(fn, Mesh.of(2), MEGATRON)
    bias = next(p for p in fn.params if p.name == "h.0.attn.c_attn.bias")
    assert a.spec(bias) == (Shard(0, groups=3),)
    _same(lower(a, self_contained=True))
    assert comm_breakdown(lower(a)) == comm_breakdown(dtp(fn, tp=2))


def test_grouped_shard_gathered_in_group_order() -> None:
    fn, _, _ = _model()
    qkv = next(o for op in fn.ops for o in op.outputs if o.name == "h.0.attn.qkv")
    a = propagate(fn, Mesh.of(2), MEGATRON | {qkv: (R,)})
    assert any(r.src == (Shard(2, groups=3),) and r.dst == (R,) for r in a.redistributions())
    _same(lower(a, self_contained=True))
