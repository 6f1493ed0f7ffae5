"""Cost rules of the gradient ops added for automatic differentiation (``ConvGrad``,
``MaxPoolGrad``, ``AveragePoolGrad``); the older gradient ops are costed in ``compute.py``.

- ``ConvGrad`` is two implicit GEMMs with the forward convolution's dimensions: ``dx``
  ``(N * input pixels) x (C / group) x (M * kernel size)`` and ``dw`` ``M x (C / group *
  kernel size) x (N * output pixels)``; a result the program never uses is not computed
  (``skips_unused``, as the PyTorch lowering skips it).
- Pool gradients are memory-bound: they read ``x`` and ``dy`` and write ``dx``, with one
  FLOP per window element of ``dy``.
- ``BatchNormGrad``, ``LayerNormGrad``, ``SoftmaxGrad`` and ``LogSoftmaxGrad`` are one
  memory-bound kernel
  each over their inputs and results, priced by the profile's ``layernorm`` and ``softmax``
  fits where it has them (``BatchNormGrad`` by the ``elementwise`` one), 8 FLOPs per
  element.
"""

from __future__ import annotations

from typing import Any

from distir.analysis.cost import COST_RULES, OpCost, main_dtype, tensor_bytes
from distir.analysis.cost.compute import _products
from distir.analysis.hardware import Hardware


def _prod(xs: tuple[int, ...]) -> int:
    p = 1
    for v in xs:
        p *= v
    return p


@COST_RULES.register("ConvGrad", skips_unused=True)
def conv_grad(op_type: str, ins: tuple, outs: tuple, attrs: dict[str, Any],
              hw: Hardware) -> OpCost:
    x, w, dy = ins
    window = _prod(w.shape[2:])
    n_out_pix = x.shape[0] * _prod(dy.shape[2:])
    dims: list[tuple[int, ...]] = []
    if outs[0] is not None:  # dx: dy (pixels x M) @ w (M x C/g * window)
        dims.append((n_out_pix, w.shape[1] * window, w.shape[0]))
    if len(outs) > 1 and outs[1] is not None:  # dw: dy^T (M x pixels) @ cols (pixels x k)
        dims.append((w.shape[0], w.shape[1] * window, n_out_pix))
    return _products(hw, dims, x)


@COST_RULES.register("MaxPoolGrad", "AveragePoolGrad")
def pool_grad(op_type: str, ins: tuple, outs: tuple, attrs: dict[str, Any],
              hw: Hardware) -> OpCost:
    nbytes = tensor_bytes(ins) + tensor_bytes(outs)
    flops = float(ins[1].numel * _prod(tuple(attrs["kernel_shape"])))
    return OpCost(hw.memory_time(nbytes, flops, main_dtype(ins, outs)), flops, nbytes)


_FAMILY = {"LayerNormGrad": "layernorm", "SoftmaxGrad": "softmax", "LogSoftmaxGrad": "softmax"}


@COST_RULES.register(*_FAMILY, "BatchNormGrad")
def normalization_grad(op_type: str, ins: tuple, outs: tuple, attrs: dict[str, Any],
                       hw: Hardware) -> OpCost:
    nbytes = tensor_bytes(ins) + tensor_bytes(outs)
    flops = 8.0 * ins[-1].numel
    dt = main_dtype(ins, outs)
    family = _FAMILY.get(op_type)
    if family is None:
        return OpCost(hw.memory_time(nbytes, flops, dt), flops, nbytes)
    return OpCost(hw.kernel_time(family, nbytes, flops, dt), flops, nbytes)
