"""Tensor parallelism by pattern on the zoo's imported models: how many weights each model
splits (so that replicating everything cannot pass for tensor parallelism), and the
distributed programs under ``tp`` 2 and 4 against the sequential ones (reference executor),
for inference and for training steps (cross entropy, SGD)."""

from __future__ import annotations

import numpy as np
import onnx  # noqa: F401 - the test needs it
import pytest
import transformers  # noqa: F401 - the test needs it

import distir
from distir.transforms import Analysis, analyze, dtp
from distir.transforms.layout import T
from tests.transforms.zoo_models import zoo_analysis, zoo_inputs

SPLIT = {
    ("gpt2", "torchscript"): 9, ("gpt2", "dynamo"): 9,
    ("bert", "torchscript"): 13, ("bert", "dynamo"): 13,
    ("llama", "torchscript"): 15, ("llama", "dynamo"): 15,
    ("t5_encoder", "torchscript"): 14, ("t5_encoder", "dynamo"): 14,
    ("vit", "torchscript"): 12, ("vit", "dynamo"): 12,
    ("vit_b16", "torchscript"): 8, ("vit_b16", "dynamo"): 8,
    ("transformer_encoder", "torchscript"): 5, ("transformer_encoder", "dynamo"): 8,
    ("resnet18", "torchscript"): 17, ("resnet18", "dynamo"): 17,
    ("resnet50", "torchscript"): 42, ("resnet50", "dynamo"): 42,
    ("mobilenet_v3_small", "torchscript"): 53, ("mobilenet_v3_small", "dynamo"): 53,
    ("efficientnet_b0", "torchscript"): 79, ("efficientnet_b0", "dynamo"): 79,
    ("conv1d", "torchscript"): 2, ("conv1d", "dynamo"): 2,
}
"""Weights (rank >= 2) split over the tensor-parallel ranks in each imported model's
inference program, as measured; a change either way is a change of the pattern matching."""

SPLIT_TRAIN = {**SPLIT, **{(n, e): SPLIT[(n, e)] + 1 for n in (
    "resnet18", "mobilenet_v3_small", "vit_b16", "conv1d") for e in ("torchscript", "dynamo")}}
"""The same count in each model's training step (its backward ops must accept the split
too). A trained weight that the exporter shared by value (equal zero biases made one
initializer, also a LayerNorm's) is sliced on use and its gradient gathered, so the
training steps split what inference does; a classifier's last projection (10 classes)
also splits by classes, its cross entropy computed without gathering the logits."""

SHARED_BY_VALUE = {("gpt2", "torchscript"), ("bert", "torchscript"), ("vit", "torchscript")}
"""Training steps with a trained weight sliced on use (``Sharding.sliced``)."""

SPLIT_AT = {(("llama", "torchscript"), 4): 7, (("efficientnet_b0", "torchscript"), 4): 77,
            (("efficientnet_b0", "torchscript"), 3): 75,
            (("mobilenet_v3_small", "torchscript"), 3): 28, (("gpt2", "torchscript"), 3): 0}
"""Split weights where ``tp`` does not divide every pattern (``Sharding.for_tp``): those
patterns fall back to whole weights and the others stay split. Llama's attention (2
key/value heads) is whole at ``tp=4``, its MLPs and its embedding split; ``tp=3`` splits
the convolutions whose channels 3 divides; GPT-2 (hidden 32) none."""


def split_weights(an: Analysis, tp: int | None = None) -> list[str]:
    """The names of the bound weights of rank >= 2 that the analysis splits over the
    tensor-parallel ranks (for every ``tp`` that divides them; with ``tp``, under ``tp``)."""
    sh = an.sharding if tp is None else an.sharding.for_tp(tp)
    fn = sh.prog.fn
    return [p.name for p in fn.params if p.name in fn.initializers
            and len(sh.prog.shape(p)) >= 2 and T in sh.layout[p].marks]



def _close(got: list, want: list) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("name", "exporter"), sorted(SPLIT), ids=lambda x: str(x))
def test_split_weight_count(name: str, exporter: str) -> None:
    _, an = zoo_analysis(name, exporter)
    assert len(split_weights(an)) == SPLIT[(name, exporter)], split_weights(an)


@pytest.mark.parametrize("tp", [2, 4])
@pytest.mark.parametrize(("name", "exporter"), sorted(SPLIT), ids=lambda x: str(x))
def test_inference_equals_sequential(name: str, exporter: str, tp: int) -> None:
    """Under ``tp`` ranks the self-contained program computes the sequential results; a
    configuration may be refused only where a split axis is not divisible by ``tp``."""
    m, an = zoo_analysis(name, exporter)
    ins = zoo_inputs(name)
    want = distir.execute(m.entry, ins)
    sc = dtp(an, tp=tp, self_contained=True)  # never refused: see test_tp_fallback
    distir.verify(sc, num_devices=tp)
    if split_weights(an, tp):  # the row-parallel products are summed over the ranks
        assert "MPIAllreduce" in distir.dumps(sc)
    _close(distir.execute(sc, ins, check_types=False), want)


_steps: dict[tuple[str, str], Analysis] = {}


@pytest.mark.parametrize("tp", [2, 4])
@pytest.mark.parametrize(("name", "exporter"), sorted(SPLIT), ids=lambda x: str(x))
def test_training_step_equals_sequential(name: str, exporter: str, tp: int) -> None:
    """The training step (cross entropy, SGD) under ``tp`` ranks updates the weights as
    the sequential step does."""
    from distir.analysis import type_env
    from distir.transforms import training_step

    m, an = zoo_analysis(name, exporter)
    key = (name, exporter)
    if key not in _steps:
        _steps[key] = analyze(training_step(m.entry, loss="cross_entropy", optimizer="sgd"))
    st = _steps[key]
    step = st.fn
    assert len(split_weights(st)) == SPLIT_TRAIN[key], split_weights(st)
    target = type_env(step)[step.params[-1]]
    labels = np.random.default_rng(0).integers(0, 3, size=target.shape).astype(np.int64)
    ins = zoo_inputs(name) + [labels]
    want = distir.execute(step, ins)
    sc = dtp(st, tp=tp, self_contained=True)
    if key in SHARED_BY_VALUE:  # the split uses' parts of the shared biases' gradients
        assert "MPIAllgather" in distir.dumps(sc)
    _close(distir.execute(sc, ins, check_types=False), want)


FALLBACK = [("llama", "torchscript", 4), ("efficientnet_b0", "torchscript", 3),
            ("mobilenet_v3_small", "torchscript", 3), ("gpt2", "torchscript", 3)]


@pytest.mark.parametrize(("name", "exporter", "tp"), FALLBACK, ids=lambda x: str(x))
def test_tp_fallback(name: str, exporter: str, tp: int) -> None:
    """Where ``tp`` does not divide a pattern's split axis, that pattern's weights stay
    whole and the rest split: the configuration is not refused and computes the
    sequential results (inference and training step)."""
    from distir.analysis import type_env
    from distir.transforms import training_step

    m, an = zoo_analysis(name, exporter)
    assert len(split_weights(an, tp)) == SPLIT_AT[((name, exporter), tp)]
    assert len(split_weights(an, tp)) < len(split_weights(an)) or not split_weights(an)
    ins = zoo_inputs(name)
    sc = dtp(an, tp=tp, self_contained=True)
    distir.verify(sc, num_devices=tp)
    _close(distir.execute(sc, ins, check_types=False), distir.execute(m.entry, ins))
    key = (name, exporter)
    if key not in _steps:
        _steps[key] = analyze(training_step(m.entry, loss="cross_entropy", optimizer="sgd"))
    st = _steps[key]
    step = st.fn
    target = type_env(step)[step.params[-1]]
    labels = np.random.default_rng(0).integers(0, 3, size=target.shape).astype(np.int64)
    ins = ins + [labels]
    _close(distir.execute(dtp(st, tp=tp, self_contained=True), ins, check_types=False),
           distir.execute(step, ins))


def test_training_step_runs_on_gloo() -> None:
    """BERT's dynamo training step at ``tp=2`` on gloo (torch's lowering of every local op):
    heads split through the ``(B·H, S, d)`` view, a vocabulary-parallel embedding, and the
    gathered gradient of the bias that dynamo shares with a LayerNorm."""
    import torch  # noqa: F401 - the test needs it

    from distir.analysis import type_env
    from distir.transforms import training_step

    m, _ = zoo_analysis("bert", "dynamo")
    step = training_step(m.entry, loss="cross_entropy", optimizer="sgd")
    target = type_env(step)[step.params[-1]]
    labels = np.random.default_rng(0).integers(0, 3, size=target.shape).astype(np.int64)
    ins = zoo_inputs("bert") + [labels]
    sc = dtp(step, tp=2, self_contained=True)
    assert "MPIAllgather" in distir.dumps(sc)
    res = distir.run(sc, ins, backend="gloo", steps=1, warmup=0, timeout_s=300)
    assert res is not None and res.outputs is not None
    want = distir.execute(step, ins)  # the backend returns the scalar loss as (1,)
    _close([np.asarray(g).reshape(np.shape(w)) for g, w in zip(res.outputs, want)], want)
