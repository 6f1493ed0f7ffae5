"""Models we did not write whose weights are read by several layers (and one whose
projections are grouped convolutions), trained distributed: every writer's program (D, K,
P, T and their compositions) computes the sequential training step's updated weights."""

from __future__ import annotations

import numpy as np

import distir
from distir.transforms import training_step
from tests.transforms.helpers import check_every_writer

CONFIGS = [(2, 1, 1, 1), (1, 1, 1, 2), (1, 1, 2, 2), (2, 1, 2, 2), (1, 2, 1, 1),
           (2, 2, 1, 1)]


def _check(spec: object, exporter: str) -> None:
    from tests.zoo.export import exported

    m = distir.import_onnx(exported(spec, exporter).path,  # type: ignore[arg-type]
                           dims=spec.dims(batch=4, seq=8))  # type: ignore[attr-defined]
    step = training_step(m.entry, loss="mse", optimizer="sgd")
    (ids,) = (t.numpy() for t in spec.inputs(4, 8))  # type: ignore[attr-defined]
    out = distir.infer_types(m.entry)[0]
    target = np.random.default_rng(0).standard_normal(out.shape).astype(np.float32)
    check_every_writer(step, [ids, target], CONFIGS, 2)


def test_hf_albert_trains_distributed() -> None:
    """A tiny HF ALBERT (dynamo): three layers read one layer's weights, so a two-stage
    pipeline places them on both stages and sums their gradients over the stages."""
    from tests.zoo.models import ALBERT

    _check(ALBERT, "dynamo")


def test_hf_mobilebert_trains_distributed() -> None:
    """A tiny HF MobileBERT (dynamo): bottleneck blocks, several feed-forward blocks a
    layer, and dynamo's one initializer for every equal-valued bias and ``NoNorm`` weight
    (read by projections of every layer and of the embeddings)."""
    from tests.zoo.models import MOBILEBERT

    _check(MOBILEBERT, "dynamo")


def test_hf_squeezebert_trains_distributed() -> None:
    """A tiny HF SqueezeBERT (dynamo): its projections are grouped 1-D convolutions of
    kernel 1 over the transposed token tensor."""
    from tests.zoo.models import SQUEEZEBERT

    _check(SQUEEZEBERT, "dynamo")
