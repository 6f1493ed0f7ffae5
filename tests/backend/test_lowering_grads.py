"""The gradient programs of ``grad`` run on the PyTorch backend and compute what the
reference executor computes: every VJP rule's ops (the gradient ops ``ConvGrad``,
``MaxPoolGrad``, ``AveragePoolGrad`` included) lowered, one case per rule."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch  # noqa: F401 - the test needs it

from distir.backend.lowering import LOWERINGS, load_lowerings  # noqa: E402
from distir.ir import DType, FunctionBuilder, TensorType  # noqa: E402
from distir.transforms import grad  # noqa: E402
from tests.backend.test_lowering import check, project, run_local  # noqa: E402
from tests.transforms.test_grad import CASES, make_case  # noqa: E402

# HardSwish's forward lowering comes with the ONNX ops being added beside this work.
load_lowerings()
NOT_LOWERED = {"hard_swish"} if "HardSwish" not in LOWERINGS else set()


@pytest.mark.parametrize("case", [c for c in CASES if c[0] not in NOT_LOWERED],
                         ids=[c[0] for c in CASES if c[0] not in NOT_LOWERED])
def test_gradient_program_lowers_and_matches(case: tuple) -> None:
    fn, vals, names = make_case(case)
    check(grad(fn, names), vals, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("need", [(True, False), (False, True)])
def test_conv_grad_skips_the_dead_result(need: tuple[bool, bool]) -> None:

    from distir.backend.lowering import compile_program

    b = FunctionBuilder("f")
    xv = b.param("x", TensorType(DType.Float32, (2, 4, 6, 6), 0))
    w = b.param("w", TensorType(DType.Float32, (6, 2, 3, 3), 0))
    dy = b.param("dy", TensorType(DType.Float32, (2, 6, 4, 3), 0))
    dx, dw = b.op("ConvGrad", xv, w, dy, strides=[1, 2], pads=[0, 1, 0, 0],
                  dilations=[1, 1], group=2)
    fn = b.ret(dx if need[0] else dw)
    prog = compile_program(project(fn).programs[0], torch.device("cpu"))
    rng = np.random.default_rng(0)
    ins: list[Any] = [torch.from_numpy(rng.standard_normal(p.type.shape).astype(np.float32))
                      for p in fn.params]
    res = prog.steps[0].kernel(*ins)
    assert (res[0] is None) != need[0] and (res[1] is None) != need[1]
    (got,) = run_local(fn, [t.numpy() for t in ins])
    check(fn, [t.numpy() for t in ins], rtol=1e-4, atol=1e-4)
    assert got.shape == ((2, 4, 6, 6) if need[0] else (6, 2, 3, 3))


def test_batch_norm_grad_lowers() -> None:
    """``BatchNormGrad`` on its own."""
    b = FunctionBuilder("f")
    xv = b.param("x", TensorType(DType.Float32, (4, 3, 5, 2), 0))
    w = b.param("w", TensorType(DType.Float32, (3,), 0))
    dy = b.param("dy", TensorType(DType.Float32, (4, 3, 5, 2), 0))
    fn = b.ret(*b.op("BatchNormGrad", xv, w, dy, epsilon=1e-3))
    rng = np.random.default_rng(0)
    check(fn, [rng.standard_normal(p.type.shape).astype(np.float32) for p in fn.params],
          rtol=1e-4, atol=1e-5)
