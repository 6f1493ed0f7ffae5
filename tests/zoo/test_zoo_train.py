"""``training_step`` of every zoo model (both exporters) types, simulates, and runs on the
PyTorch backend (gloo, on the CPU) to the reference executor's results.

The step is MSE against a random target with SGD, every weight trained; outputs are the
loss and the updated weights. Uses the zoo's cached exports (``tests/zoo/export.py``).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch
import transformers  # noqa: F401 - the zoo's models need it

import distir
from distir.analysis import random_inputs
from distir.backend import Session
from distir.transforms import training_step
from tests.zoo.models import BATCH, EXPORTERS, SEQ, SPECS

PAIRS = [(s.name, e) for s in SPECS for e in EXPORTERS]


@pytest.fixture(scope="module")
def session() -> Iterator[Session]:
    with Session(1, "gloo", timeout_s=120) as s:
        yield s


@pytest.mark.parametrize(("model", "exporter"), PAIRS, ids=[f"{m}-{e}" for m, e in PAIRS])
def test_zoo_training_step_runs_as_executed(session: Session, model: str,
                                            exporter: str) -> None:
    from tests.zoo.export import exported
    from tests.zoo.models import BY_NAME

    spec = BY_NAME[model]
    fn = distir.import_onnx(exported(spec, exporter).path, dims=spec.dims()).entry
    step = training_step(fn, loss="mse", optimizer="sgd", lr=0.01)
    assert len(step.returns) >= 2  # the loss, then the updated weights
    distir.infer_types(step)
    sim = distir.simulate(step, hardware="h100-sxm")
    assert sim.latency_s > 0
    # The inputs the zoo feeds the model (token ids must index the vocabulary), a random
    # target; the weights are the step's initializers.
    feeds = [a.numpy() for a in spec.inputs(BATCH, SEQ)]
    free = [p for p in step.params if p.name not in step.initializers]
    extra = random_inputs(step, seed=7)[len(feeds):]
    assert len(free) == len(feeds) + len(extra)
    args = feeds + extra
    want = distir.execute(step, args)
    got = session.run(step, args, steps=1, warmup=0).outputs
    assert len(got) == len(want)
    for g, w in zip(got, want):
        scale = 1.0 + float(np.abs(w).max()) if w.size else 1.0
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * scale)
    torch.manual_seed(0)
