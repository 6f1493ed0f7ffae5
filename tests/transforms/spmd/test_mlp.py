"""SPMD layouts on the MLP training step: data, tensor and mixed parallelism as layout
assignments, lowered and compared with the sequential program (reference executor) and
with ``dtp``'s communication."""

from __future__ import annotations

import numpy as np
import pytest

import distir
from distir.analysis import random_inputs
from distir.errors import ConfigError, TransformError
from distir.ir import dumps, parse
from distir.transforms.spmd import (
    Mesh,
    Partial,
    R,
    Shard,
    comm_breakdown,
    communicated_elements,
    lower,
    propagate,
)
from distir.transforms.spmd.rules import Outcome
from distir.transforms.tower import dtp  # the reference the passes are checked against

S0, S1 = Shard(0), Shard(1)


def _mlp(layers: int = 2, batch: int = 8) -> distir.Function:
    return distir.models.mlp(batch_size=batch, input_dim=4, hidden_dim=8, output_dim=4,
                             num_layers=layers)


def _same(seq: distir.Function, out: distir.Function) -> None:
    ins = random_inputs(seq, seed=3)
    want = distir.execute(seq, ins)
    got = distir.execute(out, ins)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


DP = {"x": (S0,), "y": (S0,)}
TP = {"w0": (S1,), "w1": (S0,)}


def test_data_parallel_is_an_assignment() -> None:
    seq = _mlp()
    a = propagate(seq, Mesh.of(2), DP)
    a.check()
    text = a.dumps()
    assert "%dw0: (P) -> (R)" in text and "%dw1: (P) -> (R)" in text
    assert [str(r.value.name) for r in a.redistributions()] == ["dw0", "dw1"]
    _same(seq, lower(a, self_contained=True))
    out = lower(a)
    assert comm_breakdown(out) == comm_breakdown(dtp(seq, dp=2))
    assert communicated_elements(out) == communicated_elements(dtp(seq, dp=2))


def test_megatron_is_an_assignment() -> None:
    seq = _mlp()
    a = propagate(seq, Mesh.of(2), TP)
    assert a.spec(seq.ops[2].outputs[0]) == (Partial(),)  # h1: row-parallel product
    _same(seq, lower(a, self_contained=True))
    out = lower(a)
    assert comm_breakdown(out) == comm_breakdown(dtp(seq, tp=2))


def test_column_split_alone_finds_the_row_split() -> None:
    """Only w0 is seeded: the rules demand w1 split by rows (a local slice), as Megatron."""
    seq = _mlp()
    a = propagate(seq, Mesh.of(2), {"w0": (S1,)})
    assert a.params[1] == (S0,)  # w1 is loaded as its first reader reads it
    assert a.redistributions()[0].value.name == "h1"
    assert comm_breakdown(lower(a)) == comm_breakdown(dtp(seq, tp=2))
    _same(seq, lower(a, self_contained=True))


def test_dp_and_tp_on_a_2d_mesh() -> None:
    seq = _mlp(layers=4)
    seeds = {"x": (S0, R), "y": (S0, R), "w0": (R, S1), "w1": (R, S0), "w2": (R, S1),
             "w3": (R, S0)}
    a = propagate(seq, Mesh.of(2, 2), seeds)
    _same(seq, lower(a, self_contained=True))
    out = lower(a)
    ref = dtp(seq, dp=2, tp=2)
    assert comm_breakdown(out) == comm_breakdown(ref)
    assert communicated_elements(out) == communicated_elements(ref)


def test_mixed_per_layer_plan() -> None:
    """Layers 0-1 tensor-parallel, layers 2-3 data-parallel (the batch split at a2)."""
    seq = _mlp(layers=4)
    a2 = next(o for op in seq.ops for o in op.outputs if o.name == "a1")
    a = propagate(seq, Mesh.of(2), {"w0": (S1,), "w1": (S0,), a2: (S0,), "y": (S0,)})
    a.check()
    kinds = {k[0] for k in comm_breakdown(lower(a))}
    assert "MPIAllreduce" in kinds
    _same(seq, lower(a, self_contained=True))


def test_reduce_scatter_and_shard_to_shard() -> None:
    seq = _mlp()
    a0, h1 = seq.ops[1].outputs[0], seq.ops[2].outputs[0]
    a = propagate(seq, Mesh.of(2), {"w0": (S1,), "w1": (S0,), h1: (S0,)})
    assert ("MPIReduceScatter", (8, 4), 2) in comm_breakdown(lower(a))
    _same(seq, lower(a, self_contained=True))
    b = propagate(seq, Mesh.of(2), {"w0": (S1,), a0: (S0,)})  # S(1) -> S(0): gather, slice
    assert any(r.src == (S1,) and r.dst == (S0,) for r in b.redistributions())
    assert ("MPIAllgather", (8, 4), 2) in comm_breakdown(lower(b))
    _same(seq, lower(b, self_contained=True))


def test_lowered_program_prints_and_parses() -> None:
    seq = _mlp()
    out = lower(propagate(seq, Mesh.of(2), DP))
    text = dumps(out)
    assert dumps(parse(text).entry) == text
    distir.verify(out, num_devices=2)


def test_a_single_placement_seeds_a_1d_mesh() -> None:
    seq = _mlp()
    a = propagate(seq, Mesh.of(2), {"x": S0, "y": S0})
    assert a.params[2] == (S0,) and a.params[3] == (S0,)


def test_mesh_on_other_devices() -> None:
    seq = _mlp()
    a = propagate(seq, Mesh((2,), (1, 2)), DP)
    out = lower(a)
    assert {p.type.device for p in out.params} == {1, 2}


def test_bad_seeds_are_one_line_errors() -> None:
    seq = _mlp()
    with pytest.raises(ConfigError, match="does not divide dimension 0"):
        propagate(seq, Mesh.of(3), {"x": (S0,)})
    with pytest.raises(ConfigError, match="not a value of @main"):
        propagate(seq, Mesh.of(2), {"nope": (S0,)})
    with pytest.raises(ConfigError, match="distinct devices"):
        Mesh((2,), (0, 0))


def test_check_refuses_a_wrong_outcome() -> None:
    seq = _mlp()
    a = propagate(seq, Mesh.of(2), DP)
    wrong = Outcome(((R,),), ((),))  # Relu of a batch-split h0 said to be whole
    bad = type(a)(a.prog, a.mesh, a.params, a.reads,
                  tuple(a.outcomes[:1]) + (wrong,) + tuple(a.outcomes[2:]))
    with pytest.raises(TransformError, match="the assignment says"):
        bad.check()
