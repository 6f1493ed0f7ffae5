"""Lowerings for training: ``BatchNormalization`` in training mode (batch statistics and the
running statistics ONNX defines) and the pool gradients' ATen kernels, against the reference
executor on the CPU."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from distir.ir import DType, FunctionBuilder, TensorType
from tests.backend.test_lowering import check, random_for

F32 = DType.Float32


def _bn_train(n_out: int, shape: tuple[int, ...] = (4, 3, 5, 2), **attrs: Any) -> Any:
    b = FunctionBuilder("f")
    c = shape[1]
    x = b.param("x", TensorType(F32, shape, 0))
    ps = [b.param(n, TensorType(F32, (c,), 0)) for n in ("w", "b", "m", "v")]
    outs = b.op("BatchNormalization", x, *ps, num_results=n_out, training_mode=1, **attrs)
    return b.ret(*(outs if isinstance(outs, tuple) else (outs,)))


@pytest.mark.parametrize("shape", [(4, 3, 5, 2), (6, 3), (2, 3, 4, 2, 2)])
def test_batch_norm_training_mode(shape: tuple[int, ...]) -> None:
    fn = _bn_train(3, shape, momentum=0.8, epsilon=1e-3)
    ins = random_for(fn, seed=1)
    ins[0] = ins[0] * 3.0 + 1.0
    ins[4] = np.abs(ins[4]) + 0.5
    check(fn, ins, rtol=1e-4, atol=1e-5)


def _pool_grad(op: str, kernel: list[int], strides: list[int], pads: list[int],
               x_shape: tuple[int, ...], dy_shape: tuple[int, ...], **attrs: Any) -> Any:
    b = FunctionBuilder("f")
    x = b.param("x", TensorType(F32, x_shape, 0))
    dy = b.param("dy", TensorType(F32, dy_shape, 0))
    return b.ret(b.op(op, x, dy, kernel_shape=kernel, strides=strides, pads=pads, **attrs))


@pytest.mark.parametrize("include", [0, 1])
@pytest.mark.parametrize("geom", [
    ([3, 3], [2, 2], [1, 1, 1, 1], (2, 3, 7, 7), (2, 3, 4, 4)),   # symmetric pads
    ([2, 2], [2, 2], [0, 0, 0, 0], (2, 3, 6, 6), (2, 3, 3, 3)),   # no pads
    ([3], [1], [1, 1], (2, 3, 6), (2, 3, 6)),                      # 1-D, as 2-D
    ([2, 2, 2], [2, 2, 2], [0] * 6, (1, 2, 4, 4, 4), (1, 2, 2, 2, 2)),
    ([2, 2], [1, 1], [0, 1, 1, 0], (2, 3, 5, 5), (2, 3, 5, 5)),   # asymmetric: autograd
    ([3, 3], [2, 2], [1, 1, 1, 1], (2, 3, 6, 6), (2, 3, 4, 4)),   # ceil_mode (left out of
    ([3, 3], [1, 1], [1, 1, 1, 1], (2, 3, 5, 5), (2, 3, 5, 5)),   # the count: autograd);
])                                                                # PoolFormer's mixer
def test_average_pool_grad(include: int, geom: tuple) -> None:
    fn = _pool_grad("AveragePoolGrad", *geom, count_include_pad=include)
    check(fn, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("geom", [
    ([3, 3], [2, 2], [1, 1, 1, 1], (2, 3, 7, 7), (2, 3, 4, 4)),
    ([3], [2], [1, 1], (2, 3, 7), (2, 3, 4)),
])
def test_max_pool_grad(geom: tuple) -> None:
    n = len(geom[0])
    check(_pool_grad("MaxPoolGrad", *geom, dilations=[1] * n), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("shape", [(3, 4), ()], ids=["matrix", "scalar"])
@pytest.mark.parametrize("known_step", [True, False])
@pytest.mark.parametrize("wd", [0.0, 0.1])
def test_fused_adam(known_step: bool, wd: float, shape: tuple[int, ...]) -> None:
    """A Float32 step count takes ``torch._fused_adam_`` (copies of w, m, v updated). A
    0-d weight (a scalar an exported model keeps as an initializer) stays 0-d: its inputs
    once arrived 1-d, which CUDA's fused kernel refuses (sizes unlike the gradient's)."""
    from distir.backend.lowering import compile_program
    from tests.backend.test_lowering import one_op, project

    x = (F32, shape)
    step: Any = np.array(3, np.float32) if known_step else (F32, ())
    fn = one_op("AdamOptimizer", [x, x, x, x, step], n_out=3, lr=0.01, weight_decay=wd)
    ins = random_for(fn)
    ins[3] = np.abs(ins[3])  # v is a second moment
    if not known_step:
        ins[4] = np.array(3, np.float32)
    kernel = compile_program(project(fn).programs[-1], torch.device("cpu")).steps[-1].kernel
    assert "_fused_adam" in kernel.__qualname__
    before = [a.copy() for a in ins]
    check(fn, ins, rtol=1e-5, atol=1e-6)
    for a, b in zip(ins, before):  # the inputs are not overwritten
        np.testing.assert_array_equal(a, b)
