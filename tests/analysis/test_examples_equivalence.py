"""The distributed versions of the example training steps compute the sequential step's
update: the reference executor runs each (with type and placement checks) on the same
inputs and the updated weights agree."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import distir
from distir.analysis import execute, random_inputs

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
# shared/ lies beside the repository (here and in CI); $DISTIR_SHARED_EXAMPLES overrides.
SHARED = Path(os.environ.get("DISTIR_SHARED_EXAMPLES", ROOT.parent / "shared" / "examples"))

RTOL, ATOL = 1e-5, 1e-5


def _run(path: Path, inputs: list[np.ndarray]) -> list[np.ndarray]:
    return execute(distir.load(str(path)), inputs)


@pytest.mark.parametrize("seed", [0, 1])
def test_project_mlp_step_dp2_pp2_agree(seed: int) -> None:
    seq = distir.load(str(EXAMPLES / "mlp_step.dir"))
    inputs = random_inputs(seq.entry, seed)
    want = execute(seq, inputs)
    assert len(want) == 3
    for w, x in zip(want, inputs):  # the step does move every weight
        assert w.shape == x.shape and not np.allclose(w, x)
    for name in ("mlp_step_dp2.dir", "mlp_step_pp2.dir"):
        got = _run(EXAMPLES / name, inputs)
        assert len(got) == len(want), name
        for i, (g, w) in enumerate(zip(got, want)):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL,
                                       err_msg=f"{name}: weight {i + 1}")


def test_project_mlp_step_matches_torch() -> None:
    import torch
    seq = distir.load(str(EXAMPLES / "mlp_step.dir"))
    inputs = random_inputs(seq.entry, 3)
    got = execute(seq, inputs)
    w1, w2, w3, x, y = (torch.tensor(a, dtype=torch.float64) for a in inputs)
    ws = [w.requires_grad_() for w in (w1, w2, w3)]
    p = torch.relu(torch.relu(x @ ws[0]) @ ws[1]) @ ws[2]
    (0.5 * ((p - y) ** 2).sum()).backward()
    for g, w in zip(got, ws):
        want = (w - 0.05 * w.grad).detach().numpy()
        # float32 against float64: the error scales with the largest entry.
        np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-5 * np.abs(want).max())


@pytest.mark.skipif(not SHARED.is_dir(), reason="no shared/examples beside the repository")
def test_shared_examples_agree() -> None:
    seq = distir.load(str(SHARED / "mlp_train_step.dir"))
    inputs = random_inputs(seq.entry, 5)
    w1, w2 = execute(seq, inputs)
    # Data parallel: each replica returns its copy of both weights.
    dp = _run(SHARED / "mlp_data_parallel_2dev.dir", inputs)
    assert len(dp) == 4
    for got, want in zip(dp, (w1, w1, w2, w2)):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    # Pipeline: w1 lives on device 0, w2 on device 1.
    pp = _run(SHARED / "mlp_pipeline_2dev.dir", inputs)
    assert len(pp) == 2
    for got, want in zip(pp, (w1, w2)):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    assert not np.allclose(w1, inputs[0])
