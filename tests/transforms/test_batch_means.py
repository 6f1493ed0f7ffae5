"""Means over the split batch under D and K: each shard's mean is scaled by the shard count
before the shards' parts are summed."""

from __future__ import annotations

import numpy as np
import pytest

import distir
from distir.analysis import random_inputs
from distir.transforms import dtp

MEAN_LOSS = """func @main(%x: Tensor[Float32, (8, 4), 0], %w: Tensor[Float32, (4, 3), 0]) {
  %h = MatMul(%x, %w)
  %l = ReduceMean(%h, keepdims=0)
  %ax = Constant(value=dense<Int64>[0])
  %m = ReduceMean(%h, %ax, keepdims=1)
  return %l, %m
}"""

BATCH_NORM = """func @main(%x: Tensor[Float32, (8, 3, 2, 2), 0], %s: Tensor[Float32, (3,), 0],
           %b: Tensor[Float32, (3,), 0], %mu: Tensor[Float32, (3,), 0],
           %var: Tensor[Float32, (3,), 0]) {
  %y, %rm, %rv = BatchNormalization(%x, %s, %b, %mu, %var, training_mode=1, momentum=0.5)
  return %y, %rm, %rv
}"""


@pytest.mark.parametrize(("dp", "k"), [(2, 1), (1, 2), (2, 2), (4, 2)])
def test_reduce_mean_over_the_batch(dp: int, k: int) -> None:
    fn = distir.parse(MEAN_LOSS).entry
    ins = random_inputs(fn, seed=3)
    want = distir.execute(fn, ins)
    sc = dtp(fn, dp=dp, microbatches=k, self_contained=True)
    got = distir.execute(sc, ins, check_types=False)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_batch_norm_keeps_per_replica_statistics() -> None:
    """Training-mode BatchNormalization normalizes each shard by its own statistics (as
    DistributedDataParallel does); the running mean is the average of the shards'."""
    fn = distir.parse(BATCH_NORM).entry
    ins = random_inputs(fn, seed=4)
    ins[4] = np.abs(ins[4]) + 1
    want = distir.execute(fn, ins)
    sc = dtp(fn, dp=2, self_contained=True, batch_inputs=["x"])
    y, rm, rv = distir.execute(sc, ins, check_types=False)
    np.testing.assert_allclose(rm, want[1], rtol=1e-5, atol=1e-6)
    shards = [distir.execute(fn, [ins[0][i * 4:(i + 1) * 4], *ins[1:]], check_types=False)
              for i in range(2)]
    np.testing.assert_allclose(y, np.concatenate([s[0] for s in shards]), rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_allclose(rv, (shards[0][2] + shards[1][2]) / 2, rtol=1e-5, atol=1e-6)


def test_reshape_folds_the_batch_inside_an_axis() -> None:
    """``(S, B, d)`` viewed as ``(S·B, d)`` holds the batch after S outer elements, and
    viewing it back as ``(S, B, H, hd)`` puts the batch on axis 1 again."""
    from distir.transforms.layout import Layout, local_shape
    from distir.transforms.layout_shape_rules import reshape_layout

    folded = reshape_layout(Layout((None, "b", None)), (8, 4, 6), (32, 6))
    assert folded == Layout(("b*8", None))
    assert local_shape((32, 6), folded, 2, 1) == (16, 6)
    assert reshape_layout(folded, (32, 6), (8, 4, 2, 3)) == Layout((None, "b", None, None))
    assert reshape_layout(Layout(("b", None)), (4, 6), (24,)) == Layout(("b",))
