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
from distir.transforms import training_step
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
