"""``compose_dtp`` on the zoo's imported models (both torch exporters), inference programs
and training steps: every configuration gives the sequential program's results (reference
executor); none is refused. Slow (exports, numpy execution):
``pytest tests/transforms/spmd -m slow``."""

from __future__ import annotations

import numpy as np
import pytest

import distir
from distir.transforms.spmd import compose_dtp
from tests.transforms.zoo_models import zoo_analysis, zoo_inputs
from tests.zoo.models import SPECS

CONFIGS = [(2, 1, 1, 1), (1, 2, 1, 1), (1, 1, 2, 1), (1, 1, 2, 2), (2, 2, 2, 1),
           (2, 1, 2, 2), (1, 1, 4, 2)]
"""(dp, tp, pp, K)."""


def _check(fn: distir.Function, ins: list) -> None:
    want = distir.execute(fn, ins)
    for dp, tp, pp, k in CONFIGS:
        out = compose_dtp(fn, dp, tp, pp, k, "1f1b", self_contained=True)
        got = distir.execute(out, ins)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5,
                                       err_msg=f"D{dp} T{tp} P{pp} K{k}")


EXPORTERS = ("torchscript", "dynamo")


@pytest.mark.slow
@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("name", [s.name for s in SPECS])
def test_inference_equals_sequential(name: str, exporter: str) -> None:
    m, _ = zoo_analysis(name, exporter)
    _check(m.entry, zoo_inputs(name))


@pytest.mark.slow
@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("name", [s.name for s in SPECS])
def test_training_step_equals_sequential(name: str, exporter: str) -> None:
    from distir.analysis import random_inputs
    from distir.transforms import training_step

    m, _ = zoo_analysis(name, exporter)
    step = training_step(m.entry, loss="cross_entropy", optimizer="sgd")
    _check(step, random_inputs(step, seed=0))
