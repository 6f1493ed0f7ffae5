"""The gradient program of every VJP rule, lowered for CUDA, computes what the reference
executor computes (skipped without CUDA; CI has none: run on a GPU machine)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

from distir.analysis import execute  # noqa: E402
from distir.analysis.projection import project  # noqa: E402
from distir.backend.lowering import compile_program  # noqa: E402
from distir.backend.worker import to_torch  # noqa: E402
from distir.transforms import grad  # noqa: E402
from tests.backend.test_lowering_grads import NOT_LOWERED  # noqa: E402
from tests.transforms.test_grad import CASES, make_case  # noqa: E402

GPU_CASES = [c for c in CASES if c[0] not in NOT_LOWERED]


@pytest.mark.parametrize("case", GPU_CASES, ids=[c[0] for c in GPU_CASES])
def test_gradient_program_on_cuda(case: tuple) -> None:
    fn, vals, names = make_case(case)
    g = grad(fn, names)
    want = execute(g, vals)
    dev = torch.device("cuda")
    prog = compile_program(project(g).programs[0], dev)
    with torch.inference_mode():
        got = [o.cpu().numpy() for o in prog.run([to_torch(a, dev) for a in vals])]
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-9)
