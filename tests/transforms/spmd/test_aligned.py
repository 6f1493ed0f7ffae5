"""Lookups of known indices aligned with a split table (``spmd/aligned.py``): a mask read at
positions ``b·S + s`` of its flattened rows (``Gather``), or at index pairs ``(b, s)``
(``GatherND``), as ``transformers`` reads the attention mask under torch's torchscript and
dynamo exporters, stays split by the batch, with no communication, in ``lower`` and in
``compose_dtp``'s pipelines (no op runs after the microbatches); indices that cross the
blocks gather."""

from __future__ import annotations

import numpy as np
import pytest

import distir
from distir.transforms.program import inline_calls
from distir.transforms.spmd import Mesh, Shard, communicated_elements, lower, propagate

RANGES = """func @main(%x: Tensor[Float32, ({b}, {s}), 0]) {{
  %rows = Shape(%x, end=1)
  %cols = Shape(%x, start=1)
  %zero = Constant(value=dense<Int64, ()>[0])
  %one = Constant(value=dense<Int64, ()>[1])
  %ax0 = Constant(value=dense<Int64>[0])
  %ax1 = Constant(value=dense<Int64>[1])
  %b = Squeeze(%rows, %ax0)
  %s = Squeeze(%cols, %ax0)
  %pb = Range(%zero, %b, %one)
  %ps = Range(%zero, %s, %one)
  %pb1 = Unsqueeze(%pb, %ax1)
  %ps0 = Unsqueeze(%ps, %ax0)
"""
"""The batch's positions ``(B, 1)`` and the sequence's ``(1, S)`` of ``x``, from its shape."""

MASKED = RANGES + """  %start = Mul(%pb1, %cols)
  %pos = Add(%start, %ps0)
  %n = Constant(value=dense<Int64>[{n}])
  %last = Constant(value=dense<Int64>[{last}])
  %order = {order}
  %flat = Reshape(%x, %n)
  %m = Gather(%flat, %order, axis=0)
  %y = Mul(%m, %x)
  return %y
}}
"""


def _fn(order: str, b: int = 4, s: int = 8) -> distir.Function:
    return distir.parse(MASKED.format(order=order, b=b, s=s, n=b * s, last=b * s - 1)).entry


@pytest.mark.parametrize("order,split", [
    ("Identity(%pos)", True),  # b·S + s: device j reads its own rows
    ("Sub(%pos, %n)", True),  # the same rows counted from the end (negative indices)
    ("Sub(%last, %pos)", False),  # the rows reversed: the other device's, gathered
], ids=["own", "negative", "crossed"])
@pytest.mark.parametrize("shape", [(4, 8), (64, 128)], ids=["small", "unkept"])
def test_positions_in_the_own_rows_stay_split(order: str, split: bool,
                                              shape: tuple[int, int]) -> None:
    """Also at 8,192 positions, more than the type propagator keeps (``CONCRETE_LIMIT``):
    they are computed from the shapes (``Program.known``)."""
    fn = _fn(order, *shape)
    a = propagate(fn, Mesh.of(2), {"x": (Shard(0),)})
    m = next(o for op in a.prog.ops for o in op.outputs if o.name == "m")
    assert (a.spec(m) == (Shard(0),)) == split  # else gathered or a vocabulary lookup
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    want = distir.execute(fn, [x])[0]
    np.testing.assert_array_equal(distir.execute(lower(a, self_contained=True), [x])[0], want)
    assert (communicated_elements(lower(a)) == 0) == split


def test_positions_over_the_limit_gather(monkeypatch: pytest.MonkeyPatch) -> None:
    """Positions whose computation makes more than ``KNOWN_LIMIT`` elements are not known:
    the lookup gathers the table, and is still right."""
    import distir.transforms.program as program

    fn = _fn("Identity(%pos)", 64, 128)
    monkeypatch.setattr(program, "KNOWN_LIMIT", 8192)  # the positions alone, not the chain
    a = propagate(fn, Mesh.of(2), {"x": (Shard(0),)})
    m = next(o for op in a.prog.ops for o in op.outputs if o.name == "m")
    assert a.spec(m) != (Shard(0),)
    assert communicated_elements(lower(a)) > 0
    x = np.arange(8192, dtype=np.float32).reshape(64, 128)
    np.testing.assert_array_equal(distir.execute(lower(a, self_contained=True), [x])[0],
                                  distir.execute(fn, [x])[0])


PAIRS = RANGES + """  %axl = Constant(value=dense<Int64>[-1])
  %both = Concat(%rows, %cols, axis=0)
  %eb = Expand(%pb1, %both)
  %es = Expand(%ps0, %both)
  %last = Constant(value=dense<Int64, ()>[{last}])
  %first = {first}
  %ib = Unsqueeze(%first, %axl)
  %is = Unsqueeze(%es, %axl)
  %pairs = Concat({pairs}, axis=-1)
  %m = GatherND(%x, %pairs)
  %y = Mul(%m, %x)
  return %y
}}
"""


@pytest.mark.parametrize("first,pairs,dim", [
    ("Identity(%eb)", "%ib, %is", 0),  # (b, s): device j reads its own rows
    ("Sub(%eb, %rows)", "%ib, %is", 0),  # the rows counted from the end
    ("Sub(%last, %eb)", "%ib, %is", None),  # the rows reversed: the other device's
    ("Identity(%eb)", "%is, %ib", 1),  # (s, b): its rows read by the result's columns
], ids=["own", "negative", "crossed", "transposed"])
@pytest.mark.parametrize("shape", [(4, 4), (64, 64)], ids=["small", "unkept"])
def test_index_pairs_in_the_own_rows_stay_split(first: str, pairs: str, dim: int | None,
                                                shape: tuple[int, int]) -> None:
    """A ``GatherND`` (as torch's dynamo exporter writes ``transformers``' attention-mask
    lookup) whose index tuples' first component, cut along index dimension ``dim``, stays
    in each device's rows of the split data: local, with that component shifted, its
    result split along ``dim``; else gathered; right either way. Also at 4,096 pairs,
    more than the type propagator keeps (``CONCRETE_LIMIT``)."""
    b, s = shape
    fn = distir.parse(PAIRS.format(b=b, s=s, last=b - 1, first=first, pairs=pairs)).entry
    a = propagate(fn, Mesh.of(2), {"x": (Shard(0),)})
    m = next(o for op in a.prog.ops for o in op.outputs if o.name == "m")
    assert (a.spec(m) == (Shard(dim),)) == (dim is not None)
    x = np.arange(b * s, dtype=np.float32).reshape(shape)
    want = distir.execute(fn, [x])[0]
    np.testing.assert_array_equal(distir.execute(lower(a, self_contained=True), [x])[0], want)
    assert (communicated_elements(lower(a)) == 0) == (dim == 0)


BATCHED = """func @main(%x: Tensor[Float32, (2, 8, 3), 0]) {{
  %pairs = Constant(value=dense<Int64, (2, 2, 4, 1)>{values})
  %m = GatherND(%x, %pairs, batch_dims=1)
  return %m
}}
"""


@pytest.mark.parametrize("rows,split", [
    ([[0, 1, 2, 3], [7, 4, 5, 6]], True),  # index row j of each sample in rows 4j..4j+3
    ([[4, 1, 2, 3], [7, 0, 5, 6]], False),  # no cut does
], ids=["own", "crossed"])
def test_batched_lookup_in_the_own_rows_stays_split(rows: list[list[int]], split: bool,
                                                    ) -> None:
    """``GatherND`` with ``batch_dims=1`` on data split (2 devices) along the dimension
    the index tuples address: local where a cut of the indices along a non-batch
    dimension stays in each device's rows; else gathered; right either way."""
    idx = np.asarray(rows, dtype=np.int64)[None, ..., None].repeat(2, 0)  # (2, 2, 4, 1)
    fn = distir.parse(BATCHED.format(values=idx.ravel().tolist())).entry
    a = propagate(fn, Mesh.of(2), {"x": (Shard(1),)})
    m = next(o for op in a.prog.ops for o in op.outputs if o.name == "m")
    assert (a.spec(m) == (Shard(1),)) == split
    x = np.arange(48, dtype=np.float32).reshape(2, 8, 3)
    want = distir.execute(fn, [x])[0]
    np.testing.assert_array_equal(distir.execute(lower(a, self_contained=True), [x])[0], want)
    assert (communicated_elements(lower(a)) == 0) == split


def _masked_step(m: distir.Module) -> tuple[distir.Function, list, list]:
    """``m``'s training step, inputs whose attention mask pads sample ``j`` by
    ``j % (s/2)`` on the right (no row all masked: no NaN), and the sequential results.
    (The dynamo export's scalar initializers are trained too; the exponent 3 of its
    ``Pow`` gets ``x^3·log x``, NaN for ``x < 0``: scalars other than the loss may be
    NaN, on every configuration alike.)"""
    from distir.analysis import random_inputs
    from distir.transforms import training_step

    step = training_step(m.entry, loss="cross_entropy", optimizer="sgd")
    ins = random_inputs(step, seed=0)
    b, s = ins[1].shape
    ins[1] = (np.arange(s)[None, :] < s - np.arange(b)[:, None] % (s // 2)).astype(
        ins[1].dtype)
    want = distir.execute(step, ins)
    assert not any(np.isnan(w).any() for w in want[1:] if w.ndim) and np.isfinite(want[0])
    return step, ins, want


@pytest.mark.parametrize("cfg", [(1, 1, 2, 2), (2, 1, 2, 2)], ids=["P2K2", "D2P2K2"])
@pytest.mark.parametrize("size", [(4, None), (72, 64)], ids=["b4", "b72s64"])
def test_hf_gpt2_mask_runs_per_microbatch(cfg: tuple[int, int, int, int],
                                          size: tuple[int, int | None]) -> None:
    """HF GPT-2 (``transformers``' ``GPT2Model`` with an attention mask, exported with
    torchscript; 2 layers, d 32) as a training step: its mask, read at positions of the
    flattened batch, no longer makes the passes run the model after the microbatches; also
    at batch 72 x sequence 64, 4,608 positions, more than the type propagator keeps
    (``CONCRETE_LIMIT``): computed once from the shapes (``Program.known``), and the ops
    making them left out of the program."""
    from distir.analysis.values import CONCRETE_LIMIT
    from distir.transforms import analyze
    from distir.transforms.spmd import plan_dtp
    from tests.transforms.zoo_models import zoo_analysis

    m, _ = zoo_analysis("gpt2", "torchscript", *size)
    assert "Flatten" in {op.op_type for op in m.entry.ops}  # the graph this test is about
    step, ins, want = _masked_step(m)
    b, s = ins[1].shape
    a = analyze(step)
    lookup = next(op for op in a.prog.ops if op.op_type == "Gather" and
                  a.prog.producer_op(op.inputs[0]) is not None and
                  a.prog.producer_op(op.inputs[0]).op_type == "Flatten")  # type: ignore
    assert (b * s > CONCRETE_LIMIT) == (a.prog.const(lookup.inputs[1]) is None)
    plan = plan_dtp(a, *cfg)
    assert plan.deferred() == []  # as dtp, which keeps every op per microbatch
    lowered = plan.lower(self_contained=True)
    flat = inline_calls(lowered)  # no op computes the positions: each device's are constants
    made = {o: op.op_type for op in flat.ops for o in op.outputs}
    assert {made.get(op.inputs[1]) for op in flat.ops if op.op_type == "Gather"  # type: ignore
            and made.get(op.inputs[0]) == "Flatten"} == {"Constant"}  # type: ignore
    got = distir.execute(lowered, ins)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("cfg", [(1, 1, 2, 2), (2, 1, 2, 2)], ids=["P2K2", "D2P2K2"])
@pytest.mark.parametrize("size", [(4, None), (72, 64)], ids=["b4", "b72s64"])
def test_hf_gpt2_dynamo_mask_runs_per_microbatch(cfg: tuple[int, int, int, int],
                                                 size: tuple[int, int | None]) -> None:
    """HF GPT-2 exported with torch's dynamo exporter, whose mask lookup is a
    ``GatherND`` of the ``(B, S)`` mask at index pairs ``(b, s)`` (batch indices from
    ``Range(0, B)``, expanded and concatenated with the positions), as a training step:
    no op runs after the microbatches (214 of its 342 live ops did before), each device
    looks up with constant pairs, and the step equals the sequential one; also at batch
    72 x sequence 64 (9,216 index elements, more than the type propagator keeps)."""
    from distir.analysis.values import CONCRETE_LIMIT
    from distir.transforms import analyze
    from distir.transforms.spmd import plan_dtp
    from tests.transforms.zoo_models import zoo_analysis

    m, _ = zoo_analysis("gpt2", "dynamo", *size)
    step, ins, want = _masked_step(m)
    a = analyze(step)
    lookups = [op for op in a.prog.ops if op.op_type == "GatherND"]
    assert lookups  # the graph this test is about
    b, s = ins[1].shape
    assert all((2 * b * s > CONCRETE_LIMIT) == (a.prog.const(op.inputs[1]) is None)
               for op in lookups)
    plan = plan_dtp(a, *cfg)
    assert plan.deferred() == []
    lowered = plan.lower(self_contained=True)
    made = {o: op for op in inline_calls(lowered).ops for o in op.outputs}
    pairs = [made[op.inputs[1]] for op in made.values()  # type: ignore[index]
             if op.op_type == "GatherND"]
    assert {op.op_type for op in pairs} == {"Constant"}  # each device's own pairs
    assert {op.attrs["value"].array.shape[0] for op in pairs} == {b // (cfg[0] * cfg[3])}
    got = distir.execute(lowered, ins)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
