"""Views of a batch that are not plain reshapes distribute with their gradients. A gather
from a flattened batch with indices made from the local batch size (how the
dynamo exporter writes ``as_strided``: ``nn.AdaptiveAvgPool1d`` in HF FocalNet's and Swin's
poolers) splits with the batch, and so does its gradient: the ``ScatterND`` adding into
zeros of the flattened shape, whose rows each shard writes itself. Until then that scatter
was taken as summed over the batch, and every configuration of such a model's training
step was refused (``... mixes a per-microbatch value with a value summed over the
batch``). Indices that are not made from the local batch size still add into zeros
summed over the shards, or are refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers  # noqa: F401 - the tests of HF models need it
from torch import nn

import distir
from distir.analysis import type_env
from distir.analysis.values import type_of
from distir.errors import TransformError
from distir.ir import DType, FunctionBuilder, TensorType
from distir.transforms import analyze, dtp, tower, training_step
from tests.transforms.helpers import check_every_writer

CONFIGS = [(2, 1, 1, 1), (1, 1, 1, 2), (2, 1, 1, 2), (1, 1, 2, 2), (4, 1, 1, 1),
           (2, 2, 1, 1)]


def _scatter(local: bool, into_zeros: bool = True) -> distir.Function:
    """``y = ScatterND(zeros[4 * 8], idx, x)`` with each sample's row reversed, then
    ``y`` viewed as ``[4, 8]``; ``idx`` from ``Range(Shape(x)[0])`` (local) or constant."""
    b = FunctionBuilder("main")
    x = b.param("x", TensorType(DType.Float32, (4, 8), 0))
    i64 = np.int64
    if local:
        rows = b.op("Range", b.op("Constant", value=np.array(0, i64)),
                    b.op("Squeeze", b.op("Shape", x, end=1)),
                    b.op("Constant", value=np.array(1, i64)))
        base = b.op("Unsqueeze", b.op("Mul", rows, b.op("Constant", value=np.array(8, i64))),
                    b.op("Constant", value=np.array([1], i64)))
        idx = b.op("Add", base, b.op("Constant", value=np.arange(7, -1, -1, dtype=i64)))
    else:
        idx = b.op("Constant", value=(np.arange(4, dtype=i64)[:, None] * 8
                                      + np.arange(7, -1, -1, dtype=i64)))
    idx = b.op("Unsqueeze", idx, b.op("Constant", value=np.array([2], i64)))
    if into_zeros:
        data = b.op("Expand", b.op("Constant", value=np.array(0.0, np.float32)),
                    b.op("Constant", value=np.array([32], i64)))
    else:
        data = b.op("Constant", value=np.ones(32, np.float32))
    y = b.op("ScatterND", data, idx, b.op("Relu", x), reduction="add")
    return b.ret(b.op("Reshape", y, b.op("Constant", value=np.array([4, 8], i64))))


@pytest.mark.parametrize("write", [dtp, tower.dtp], ids=["passes", "tower"])
@pytest.mark.parametrize("dp", [2, 4])
def test_a_scatter_with_local_indices_splits_with_the_batch(dp: int, write: object) -> None:
    fn = _scatter(local=True)
    ins = [np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)]
    want = distir.execute(fn, ins)
    an = analyze(fn, batch_inputs=["x"])
    sc = write(an, dp=dp, self_contained=True)  # type: ignore[operator]
    assert not any(op.op_type == "MPIAllreduce" for op in sc.ops)  # each shard its rows
    fn_of, todo = {}, [sc]  # the scatter, in @main or in a function it calls (the tower)
    while todo:
        f = todo.pop()
        fn_of.update((op, f) for op in f.ops)
        todo.extend(op.callee for op in f.ops if op.callee is not None)
    scatters = [op for op in fn_of if op.op_type == "ScatterND"]
    assert scatters
    for op in scatters:
        data = type_of(type_env(fn_of[op])[op.inputs[0]]) if fn_of[op] is sc else None
        assert data is None or data.shape == (32 // dp,)
    np.testing.assert_allclose(distir.execute(sc, ins, check_types=False)[0], want[0])


def test_a_scatter_with_constant_indices_is_not_taken_as_local() -> None:
    """The same scatter with the indices written out for the whole batch: a shard's rows
    are not its own, so it is never split as local (refused here, with one line)."""
    fn = _scatter(local=False)
    ins = [np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)]
    want = distir.execute(fn, ins)
    try:
        sc = dtp(analyze(fn, batch_inputs=["x"]), dp=2, self_contained=True)
    except TransformError as e:
        assert "\n" not in str(e)
        return
    np.testing.assert_allclose(distir.execute(sc, ins, check_types=False)[0], want[0])


class _Pooled(nn.Module):
    """Tokens, a linear layer, the channels pooled by ``nn.AdaptiveAvgPool1d`` (an
    ``as_strided`` view in the dynamo export), a classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.pool, self.b = nn.Linear(6, 8), nn.AdaptiveAvgPool1d(1), nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.flatten(self.pool(self.a(x).transpose(1, 2)), 1))


def _check_training(fn: distir.Function, ins: list[np.ndarray]) -> None:
    step = training_step(fn, loss="cross_entropy", optimizer="sgd")
    labels = np.random.default_rng(0).integers(0, 3, size=4).astype(np.int64)
    check_every_writer(step, ins + [labels], CONFIGS, 2)


def test_an_adaptive_pool_trains_distributed() -> None:
    torch.manual_seed(0)
    x = torch.randn(4, 5, 6)
    m = distir.import_torch(_Pooled(), (x,), dynamic=[{0: "batch"}])
    assert any(op.op_type == "Gather" for op in m.entry.ops)  # the as_strided view
    _check_training(m.entry, [x.numpy()])


def test_hf_swin_trains_distributed() -> None:
    """A tiny HF Swin (TorchScript; torch's dynamo exporter fails on it): its patch merging
    takes strided slices of the token image, whose gradient scattered into the flattened
    input at positions known for the whole batch (refused under D, K and P) until the
    ``Slice`` rule spread the rows by views and zero blocks."""
    from tests.zoo.export import exported
    from tests.zoo.models import SWIN

    m = distir.import_onnx(exported(SWIN, "torchscript").path, dims=SWIN.dims(batch=4))
    _check_training(m.entry, [t.numpy() for t in SWIN.inputs(4, 8)])


def test_hf_focalnet_trains_distributed() -> None:
    """A model we did not write: a tiny HF FocalNet (focal modulation, its pooler an
    adaptive pool), exported by dynamo: its training step under D, K, P and T computes the
    sequential step's updated weights."""
    from tests.zoo.export import exported
    from tests.zoo.models import FOCALNET

    m = distir.import_onnx(exported(FOCALNET, "dynamo").path, dims=FOCALNET.dims(batch=4))
    _check_training(m.entry, [t.numpy() for t in FOCALNET.inputs(4, 8)])


def test_hf_convbert_torchscript_trains_distributed() -> None:
    """A tiny HF ConvBERT from the TorchScript exporter: its attention mask is a gather from
    the flattened ``[batch x seq]`` ones at indices made from ``Range(batch)`` (advanced
    indexing), batch-free until the scores take it: refused under D and P (``... would have
    to be split as [b, _, _, _]``) until each shard made its own rows and indices. Its
    training step under D, K, P and T computes the sequential step's weights."""
    from tests.zoo.export import exported
    from tests.zoo.models import CONVBERT

    m = distir.import_onnx(exported(CONVBERT, "torchscript").path,
                           dims=CONVBERT.dims(batch=4, seq=8))
    step = training_step(m.entry, loss="mse", optimizer="sgd")
    (ids,) = (t.numpy() for t in CONVBERT.inputs(4, 8))
    target = np.random.default_rng(0).standard_normal((4, 8, 32)).astype(np.float32)
    check_every_writer(step, [ids, target], CONFIGS, 2)


def _scatter_rows(rows: int, step: int, fix_up: bool = False) -> distir.Function:
    """``ScatterND(zeros[rows, 3], Range(B) * step, x)``: sample ``s`` into row ``s·step``;
    with ``fix_up``, the indices pass through ``Where(i < 0, i + rows, i)`` first."""
    b = FunctionBuilder("main")
    x = b.param("x", TensorType(DType.Float32, (4, 3), 0))
    i64 = np.int64

    def c(v: object) -> object:
        return b.op("Constant", value=np.array(v))

    rng = b.op("Range", c(i64(0)), b.op("Squeeze", b.op("Shape", x, end=1)), c(i64(1)))
    idx = b.op("Mul", rng, c(i64(step)))
    if fix_up:
        idx = b.op("Where", b.op("Less", idx, c(i64(0))), b.op("Add", idx, c(i64(rows))), idx)
    idx = b.op("Unsqueeze", idx, c(np.array([1], i64)))
    data = b.op("Expand", c(np.float32(0.0)), c(np.array([rows, 3], i64)))
    return b.ret(b.op("ScatterND", data, idx, b.op("Relu", x), reduction="add"))


@pytest.mark.parametrize(("rows", "step", "fix_up"),
                         [(4, 1, False), (8, 2, False), (8, 2, True), (8, 1, False),
                          (12, 1, False), (6, 1, False)], ids=str)
def test_a_local_scatter_splits_only_rows_that_are_its_samples(rows: int, step: int,
                                                               fix_up: bool) -> None:
    """Indices made from the local batch size split ``data`` only where sample ``s`` lands
    in rows ``[s·L, (s+1)·L)``; elsewhere (8 rows, sample ``s`` into row ``s``) each shard's
    local indices would address another shard's rows: refused. Arithmetic after the
    ``Range`` (a fix-up of negative indices) keeps them local (a review found both writing
    wrong numbers through the builder tower)."""
    fn = _scatter_rows(rows, step, fix_up)
    ins = [np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)]
    want = distir.execute(fn, ins)[0]
    an = analyze(fn, batch_inputs=["x"])
    for write in (dtp, tower.dtp):
        for cfg in (dict(dp=2), dict(microbatches=2), dict(dp=2, microbatches=2)):
            try:
                sc = write(an, self_contained=True, **cfg)  # type: ignore[operator]
            except TransformError as e:
                assert rows != step * 4 and "\n" not in str(e)
                continue
            got = distir.execute(sc, ins, check_types=False)[0]
            np.testing.assert_allclose(got, want, rtol=1e-6)
