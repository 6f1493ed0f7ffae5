"""SPMD layouts on tiny GPT-2 layers (the builder's inference step, 2 layers): the batch
split, Megatron's MLP block, and both on a 2-D mesh, against the reference executor."""

from __future__ import annotations

from functools import cache

import numpy as np

import distir
from distir.models.gpt2 import GPT2Config
from distir.transforms import dtp
from distir.transforms.spmd import Mesh, R, Shard, comm_breakdown, lower, propagate

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
