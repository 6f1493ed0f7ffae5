"""Lookups of known indices aligned with a split table (``spmd/aligned.py``): a mask read at
positions ``b·S + s`` of its flattened rows (as ``transformers`` reads the attention mask)
stays split by the batch, with no communication, in ``lower`` and in ``compose_dtp``'s
pipelines (no op runs after the microbatches); indices that cross the blocks gather."""

from __future__ import annotations

import numpy as np
import pytest

import distir
from distir.transforms.spmd import Mesh, R, Shard, communicated_elements, lower, propagate

MASKED = """func @main(%x: Tensor[Float32, (4, 8), 0]) {{
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
  %start = Mul(%pb1, %cols)
  %pos = Add(%start, %ps0)
  %n = Constant(value=dense<Int64>[32])
  %last = Constant(value=dense<Int64>[31])
  %order = {order}
  %flat = Reshape(%x, %n)
  %m = Gather(%flat, %order, axis=0)
  %y = Mul(%m, %x)
  return %y
}}
"""


def _fn(order: str) -> distir.Function:
    return distir.parse(MASKED.format(order=order)).entry


@pytest.mark.parametrize("order,split", [
    ("Identity(%pos)", True),  # b·S + s: device j reads its own rows
    ("Sub(%pos, %n)", True),  # the same rows counted from the end (negative indices)
    ("Sub(%last, %pos)", False),  # the rows reversed: the other device's, gathered
], ids=["own", "negative", "crossed"])
def test_positions_in_the_own_rows_stay_split(order: str, split: bool) -> None:
    fn = _fn(order)
    a = propagate(fn, Mesh.of(2), {"x": (Shard(0),)})
    m = next(o for op in a.prog.ops for o in op.outputs if o.name == "m")
    assert a.spec(m) == ((Shard(0),) if split else (R,))
    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    want = distir.execute(fn, [x])[0]
    np.testing.assert_array_equal(distir.execute(lower(a, self_contained=True), [x])[0], want)
    assert (communicated_elements(lower(a)) == 0) == split


@pytest.mark.parametrize("cfg", [(1, 1, 2, 2), (2, 1, 2, 2)], ids=["P2K2", "D2P2K2"])
def test_hf_gpt2_mask_runs_per_microbatch(cfg: tuple[int, int, int, int]) -> None:
    """HF GPT-2 (``transformers``' ``GPT2Model`` with an attention mask, exported with
    torchscript; 2 layers, d 32) as a training step: its mask, read at positions of the
    flattened batch, no longer makes the passes run the model after the microbatches."""
    from distir.analysis import random_inputs
    from distir.transforms import analyze, training_step
    from distir.transforms.spmd import plan_dtp
    from tests.transforms.zoo_models import zoo_analysis

    m, _ = zoo_analysis("gpt2", "torchscript")
    assert "Flatten" in {op.op_type for op in m.entry.ops}  # the graph this test is about
    step = training_step(m.entry, loss="cross_entropy", optimizer="sgd")
    ins = random_inputs(step, seed=0)
    b, s = ins[1].shape  # the attention mask: sample j padded by j positions on the right
    ins[1] = (np.arange(s)[None, :] < s - np.arange(b)[:, None]).astype(ins[1].dtype)
    want = distir.execute(step, ins)
    assert not any(np.isnan(w).any() for w in want)
    plan = plan_dtp(analyze(step), *cfg)
    assert plan.deferred() == []  # as dtp, which keeps every op per microbatch
    got = distir.execute(plan.lower(self_contained=True), ins)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
