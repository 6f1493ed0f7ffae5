"""DeBERTa-v3's disentangled attention distributes with its gradient. Its relative-position
keys and queries are batch-free, projected once, then tiled over batch x heads (a ``Tile``
whose count is ``size(0) // heads`` of the split queries) and transposed; its scores are
gathered at each pair's distance (``GatherElements`` of an expanded index), whose
gradient scatters into zeros longer than the indices along the gathered axis. Until then
every configuration that splits the batch was refused (``... would have to be split as
[b, _, _]``, then ``ScatterElements: data, indices and updates are split
differently``). BEiT interpolates its relative-position bias table (``Resize``) in every
layer: its training step could not be differentiated until ``Resize`` had a gradient
(``grad: no VJP rule for op Resize``)."""

from __future__ import annotations

import numpy as np
import pytest
import transformers  # noqa: F401 - the tests of HF models need it

import distir
from distir.errors import TransformError
from distir.transforms import analyze, dtp, training_step
from tests.transforms.helpers import check_every_writer

CONFIGS = [(2, 1, 1, 1), (1, 1, 1, 2), (1, 1, 2, 2), (2, 2, 1, 1)]


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_hf_deberta_v3_trains_distributed(exporter: str) -> None:
    """A tiny HF DeBERTa-v3 (relative attention, shared keys, log buckets) of both
    exporters: its training step under D, K, P and T computes the sequential step's
    updated weights, through the passes and the builder tower."""
    from tests.zoo.export import exported
    from tests.zoo.models import DEBERTA_V3

    m = distir.import_onnx(exported(DEBERTA_V3, exporter).path,
                           dims=DEBERTA_V3.dims(batch=4, seq=8))
    step = training_step(m.entry, loss="mse", optimizer="sgd")
    (ids,) = (t.numpy() for t in DEBERTA_V3.inputs(4, 8))
    target = np.random.default_rng(0).standard_normal((4, 8, 32)).astype(np.float32)
    _check(step, [ids, target])


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_hf_beit_trains_distributed(exporter: str) -> None:
    """A tiny HF BEiT (eager attention, a relative-position bias table resized in every
    layer) of both exporters: its training step (the TorchScript one's table's gradient
    through the ``Resize``) under D, K, P and T against the sequential step."""
    from tests.zoo.export import exported
    from tests.zoo.models import BEIT

    m = distir.import_onnx(exported(BEIT, exporter).path, dims=BEIT.dims(batch=4))
    # (dynamo drops the resize of a table to its own size; TorchScript keeps it)
    assert any(op.op_type == "Resize" for op in m.entry.ops) == (exporter == "torchscript")
    step = training_step(m.entry, loss="cross_entropy", optimizer="sgd")
    labels = np.random.default_rng(0).integers(0, 10, size=4).astype(np.int64)
    _check(step, [*(t.numpy() for t in BEIT.inputs(4, 8)), labels])


def _check(step: distir.Function, ins: list[np.ndarray]) -> None:
    """Every configuration's self-contained program computes ``step``'s results."""
    check_every_writer(step, ins, CONFIGS, 1)


def test_a_tile_count_that_does_not_divide_each_samples_rows_is_not_split() -> None:
    """``Tile(w[4, 1], size(0) // 4)`` beside ``q = x.reshape(2 * batch, 1)``: each sample
    has 2 rows, so a shard of 3 samples would tile ``6 // 4 = 1`` copy where it needs 6
    rows (a review's case). Split only when the divisor divides each sample's rows; here
    the batch split is refused, or the programs compute the sequential results."""
    import distir.ir as ir

    b = ir.FunctionBuilder("main")
    x = b.param("x", ir.TensorType(ir.DType.Float32, (6, 2), 0))
    w = b.param("w", ir.TensorType(ir.DType.Float32, (4, 1), 0))
    i64 = np.int64

    def c(v: object) -> object:
        return b.op("Constant", value=np.array(v))

    q = b.op("Reshape", x, c(np.array([12, 1], i64)))
    n = b.op("Div", b.op("Gather", b.op("Shape", q), c(i64(0))), c(i64(4)))
    reps = b.op("Concat", b.op("Unsqueeze", n, c(np.array([0], i64))), c(np.array([1], i64)),
                axis=0)
    fn = b.ret(b.op("Reshape", b.op("Relu", b.op("Add", q, b.op("Tile", w, reps))),
                    c(np.array([6, 2], i64))))
    xv = np.random.default_rng(0).standard_normal((6, 2)).astype(np.float32)
    wv = np.random.default_rng(1).standard_normal((4, 1)).astype(np.float32)
    want = distir.execute(fn, [xv, wv])
    an = analyze(fn, batch_inputs=["x"], weights=["w"])
    try:
        sc = dtp(an, dp=2, tp=1, pp=1, microbatches=1, self_contained=True)
    except TransformError as e:
        assert "\n" not in str(e)
        return
    got = distir.execute(sc, [xv, wv], check_types=False)
    for g, v in zip(got, want, strict=True):
        np.testing.assert_allclose(g, v, rtol=1e-5, atol=1e-6)
