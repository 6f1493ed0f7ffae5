"""A batch-free value tiled by the batch size into an axis that merges batch and heads
(BLOOM's ALiBi biases, as both torch exporters write them: ``Tile(x, Concat(Shape(ids)[:1],
1, 1))``) splits with the batch (the builder tower tiles each shard by its own samples;
the spmd passes tile it whole and split it), so data parallelism (and pipelines: checked
on BLOOM's exports, docs/importing.md) is no longer refused, and computes the sequential
results; a repeat count read from the batch on an axis left whole is still refused."""

from __future__ import annotations

import numpy as np
import pytest

import distir
from distir.ir import DType, FunctionBuilder, TensorType
from distir.transforms import analyze, dtp


def _step(by_batch: bool = True) -> object:
    b = FunctionBuilder("main")
    x = b.param("x", TensorType(DType.Float32, (4, 2, 8), 0))  # (batch, heads, width)
    bias = b.op("Constant", value=np.arange(16, dtype=np.float32).reshape(2, 8))
    n = b.op("Shape", x, end=1) if by_batch else \
        b.op("Constant", value=np.array([4], dtype=np.int64))
    reps = b.op("Concat", n, b.op("Constant", value=np.array([1], dtype=np.int64)), axis=0)
    tiled = b.op("Tile", bias, reps)  # (batch * heads, width)
    merged = b.op("Reshape", x, b.op("Constant", value=np.array([8, 8], dtype=np.int64)))
    return b.ret(b.op("Relu", b.op("Add", merged, tiled)))


@pytest.mark.parametrize("cfg", [dict(dp=2), dict(dp=4), dict(dp=2, tp=2)],
                         ids=str)
def test_a_tile_by_the_batch_size_splits_with_the_batch(cfg: dict) -> None:
    fn = _step()
    ins = [np.random.default_rng(0).standard_normal((4, 2, 8)).astype(np.float32)]
    want = distir.execute(fn, ins)
    sc = dtp(analyze(fn, batch_inputs=["x"]), self_contained=True, **cfg)
    np.testing.assert_allclose(distir.execute(sc, ins, check_types=False)[0], want[0],
                               rtol=1e-6)


def test_a_tile_by_a_fixed_count_is_still_refused() -> None:
    """Tiled by a constant 4 (not read from the batch), the rows are not the samples'."""
    from distir.errors import TransformError

    with pytest.raises(TransformError, match="cannot split the batch"):
        dtp(analyze(_step(by_batch=False), batch_inputs=["x"]), dp=2, self_contained=True)


def test_a_tile_also_by_the_batch_size_on_a_whole_axis_is_refused() -> None:
    """Tiled by the batch size on a second axis that the split leaves whole, a shard
    reading its own batch size there would shorten that axis: refused, in both writers."""
    from distir.errors import TransformError
    from distir.transforms import tower

    b = FunctionBuilder("main")
    x = b.param("x", TensorType(DType.Float32, (4, 2, 4), 0))
    bias = b.param("bias", TensorType(DType.Float32, (2, 1), 0))
    n = b.op("Shape", x, end=1)
    tiled = b.op("Tile", bias, b.op("Concat", n, n, axis=0))  # (8, 4)
    merged = b.op("Reshape", x, b.op("Constant", value=np.array([8, 4], dtype=np.int64)))
    fn = b.ret(b.op("Add", merged, tiled))
    for write in (dtp, tower.dtp):
        with pytest.raises(TransformError, match="cannot split the batch"):
            write(analyze(fn, batch_inputs=["x"]), dp=2, self_contained=True)


@pytest.mark.parametrize("cfg", [dict(dp=2), dict(dp=2, microbatches=2)], ids=str)
def test_the_tower_tiles_each_shard_by_its_samples(cfg: dict) -> None:
    """The builder tower writes the tile at each shard's repeats; a learned bias (not a
    constant the type propagator folds) reaches the Tile itself."""
    from distir.transforms import tower

    b = FunctionBuilder("main")
    x = b.param("x", TensorType(DType.Float32, (4, 2, 8), 0))
    bias = b.param("bias", TensorType(DType.Float32, (2, 8), 0))
    reps = b.op("Concat", b.op("Shape", x, end=1),
                b.op("Constant", value=np.array([1], dtype=np.int64)), axis=0)
    merged = b.op("Reshape", x, b.op("Constant", value=np.array([8, 8], dtype=np.int64)))
    fn = b.ret(b.op("Relu", b.op("Add", merged, b.op("Tile", bias, reps))))
    rng = np.random.default_rng(0)
    ins = [rng.standard_normal((4, 2, 8)).astype(np.float32),
           rng.standard_normal((2, 8)).astype(np.float32)]
    want = distir.execute(fn, ins)
    sc = tower.dtp(analyze(fn, batch_inputs=["x"]), self_contained=True, **cfg)
    np.testing.assert_allclose(distir.execute(sc, ins, check_types=False)[0], want[0],
                               rtol=1e-6)
