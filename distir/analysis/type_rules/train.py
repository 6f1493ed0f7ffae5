"""Type rules of the training ops: gradients, losses and optimizers.

A gradient has the type of what it is the gradient of; a loss is a scalar tensor (shape
``()``) of the prediction's dtype; an optimizer's new state has the type of the old. The
exact semantics (reductions, label encoding, Adam's bias correction) are documented in
``distir.analysis.numpy_rules.train``.
"""

from __future__ import annotations

from typing import Any

from distir.analysis.rules import TYPE_RULES
from distir.analysis.type_rules._util import broadcast_shapes, fail, same_dtype, tensor
from distir.analysis.values import Concrete, type_of
from distir.ir.types import DType, ScalarType, TensorType

__all__ = ["matmul_shape"]

_REDUCTIONS = ("sum", "mean")


def matmul_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """The shape of ``MatMul(a, b)`` (numpy ``matmul`` semantics, 1-D operands promoted)."""
    if not a or not b:
        raise fail("MatMul operands must have rank >= 1, got shapes "
                   f"{a} and {b}")
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise fail(f"cannot multiply shapes {a} and {b}: {a2[-1]} != {b2[-2]}")
    batch = broadcast_shapes(a2[:-2], b2[:-2])
    out = batch + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


def _same(what: str, t: TensorType, u: TensorType) -> None:
    if t.shape != u.shape:
        raise fail(f"{what} must have the shape {t.shape} of the value it belongs to, got "
                   f"{u.shape}")
    if t.dtype != u.dtype:
        raise fail(f"{what} must have dtype {t.dtype.value}, got {u.dtype.value}")


def _reduction(attrs: dict[str, Any]) -> None:
    r = attrs.get("reduction", "sum")
    if r not in _REDUCTIONS:
        raise fail(f"reduction must be \"sum\" or \"mean\", got {r!r}")


def _float(t: TensorType, what: str) -> None:
    if not t.dtype.is_float:
        raise fail(f"{what} must be a floating-point tensor, got {t.dtype.value}")


@TYPE_RULES.register("MatMulGrad")
def matmul_grad(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    a, b, dy = (tensor(x, n) for x, n in zip(args, ("a", "b", "dy")))
    same_dtype([a, b, dy], op_type)
    want = matmul_shape(a.shape, b.shape)
    if dy.shape != want:
        raise fail(f"dy must have the shape {want} of MatMul(a, b) for a {a.shape} and b "
                   f"{b.shape}, got {dy.shape}")
    return (a, b)


@TYPE_RULES.register("GemmGrad")
def gemm_grad(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    a, b = tensor(args[0], "a"), tensor(args[1], "b")
    c = tensor(args[2], "c") if len(args) == 4 and args[2] is not None else None
    dy = tensor(args[-1], "dy")
    if a.rank != 2 or b.rank != 2:
        raise fail(f"a and b must be matrices, got shapes {a.shape} and {b.shape}")
    same_dtype([a, b, dy] + ([c] if c is not None else []), op_type)
    m, k = a.shape[::-1] if attrs["transA"] else a.shape
    k2, n = b.shape[::-1] if attrs["transB"] else b.shape
    if k != k2:
        raise fail(f"cannot multiply a {a.shape} (transA={attrs['transA']}) by b {b.shape} "
                   f"(transB={attrs['transB']}): {k} != {k2}")
    if dy.shape != (m, n):
        raise fail(f"dy must have the shape {(m, n)} of Gemm's result, got {dy.shape}")
    if c is not None:
        broadcast_shapes(c.shape, (m, n))
    if n_out == 3:
        if c is None:
            raise fail("three results (da, db, dc) need the inputs a, b, c, dy")
        return (a, b, c)
    return (a, b)


@TYPE_RULES.register("ReluGrad", "GeluGrad")
def activation_grad(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    x, dy = tensor(args[0], "x"), tensor(args[1], "dy")
    _same("dy", x, dy)
    if op_type == "GeluGrad":
        _float(x, "x")
        if attrs["approximate"] not in ("none", "tanh"):
            raise fail(f"approximate must be \"none\" or \"tanh\", got "
                       f"{attrs['approximate']!r}")
    return (x,)


@TYPE_RULES.register("MSELoss", "MSELossGrad")
def mse(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    p, y = tensor(args[0], "p"), tensor(args[1], "y")
    _same("the target y", p, y)
    _float(p, "p")
    _reduction(attrs)
    return (p.with_shape(()) if op_type == "MSELoss" else p,)


@TYPE_RULES.register("SoftmaxCrossEntropyLoss", "SoftmaxCrossEntropyLossGrad")
def softmax_xent(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    logits, labels = tensor(args[0], "logits"), tensor(args[1], "labels")
    _float(logits, "logits")
    _reduction(attrs)
    if logits.rank < 1:
        raise fail("logits must have a class axis (the last), got a scalar")
    if labels.dtype not in (DType.Int64, DType.Int32):
        raise fail(f"labels must be Int64 (or Int32) class indices, got {labels.dtype.value}")
    if labels.shape != logits.shape[:-1]:
        raise fail(f"labels must have the shape {logits.shape[:-1]} of logits {logits.shape} "
                   f"without its class axis, got {labels.shape}")
    return (logits.with_shape(()) if op_type == "SoftmaxCrossEntropyLoss" else logits,)


@TYPE_RULES.register("SGDOptimizer")
def sgd(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    w, dw = tensor(args[0], "w"), tensor(args[1], "dw")
    _same("the gradient dw", w, dw)
    _float(w, "w")
    return (w,)


@TYPE_RULES.register("AdamOptimizer")
def adam(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    w = tensor(args[0], "w")
    _float(w, "w")
    for x, what in zip(args[1:4], ("the gradient dw", "the first moment m",
                                   "the second moment v")):
        _same(what, w, tensor(x, what))
    st = type_of(args[4])
    if isinstance(st, TensorType):
        if st.numel != 1:
            raise fail(f"step must hold one number (shape () or (1,)), got shape {st.shape}")
    elif not isinstance(st, ScalarType):
        raise fail(f"step must be a scalar tensor, got {st}")
    s = args[4]
    if isinstance(s, Concrete) and float(s.value.reshape(-1)[0]) < 1:
        raise fail(f"step counts from 1 (the first step), got {s.value.reshape(-1)[0]}")
    return (w, w, w)


def _window_attrs(attrs: dict[str, Any], n: int, names: tuple[str, ...]) -> None:
    for name in names:
        v = attrs.get(name)
        want = 2 * n if name == "pads" else n
        if not isinstance(v, tuple) or len(v) != want:
            raise fail(f"{name} must list {want} integers for {n} spatial dimensions, got {v}")


def _pooled_shape(x: TensorType, dy: TensorType, channels: int) -> None:
    if x.rank < 3:
        raise fail(f"x must be (N, C, spatial...), got shape {x.shape}")
    if dy.rank != x.rank or dy.shape[0] != x.shape[0] or dy.shape[1] != channels:
        raise fail(f"dy must be ({x.shape[0]}, {channels}, spatial...) of rank {x.rank}, got "
                   f"shape {dy.shape}")


@TYPE_RULES.register("ConvGrad")
def conv_grad(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    x, w, dy = (tensor(a, n) for a, n in zip(args, ("x", "w", "dy")))
    same_dtype([x, w, dy], op_type)
    _float(x, "x")
    _pooled_shape(x, dy, w.shape[0] if w.rank else 0)
    g = attrs["group"]
    if w.rank != x.rank or g < 1 or x.shape[1] != w.shape[1] * g or w.shape[0] % g:
        raise fail(f"w {w.shape} does not fit x {x.shape} with group={g}")
    _window_attrs(attrs, x.rank - 2, ("strides", "pads", "dilations"))
    return (x, w)


@TYPE_RULES.register("MaxPoolGrad", "AveragePoolGrad")
def pool_grad(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    x, dy = tensor(args[0], "x"), tensor(args[1], "dy")
    same_dtype([x, dy], op_type)
    _float(x, "x")
    _pooled_shape(x, dy, x.shape[1] if x.rank else 0)
    names = ("kernel_shape", "strides", "pads") + (
        ("dilations",) if op_type == "MaxPoolGrad" else ())
    _window_attrs(attrs, x.rank - 2, names)
    return (x,)


@TYPE_RULES.register("LayerNormGrad")
def layer_norm_grad(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    x, scale, dy = (tensor(a, n) for a, n in zip(args, ("x", "scale", "dy")))
    same_dtype([x, scale, dy], op_type)
    _float(x, "x")
    _same("dy", x, dy)
    axis = attrs["axis"]
    if not -x.rank <= axis < x.rank:
        raise fail(f"axis {axis} is out of range for rank {x.rank}")
    normalized = x.shape[axis % x.rank:]
    if scale.rank > len(normalized) or broadcast_shapes(scale.shape, normalized) != normalized:
        raise fail(f"scale {scale.shape} does not broadcast to the normalized shape "
                   f"{normalized}")
    return (x, scale, scale)


@TYPE_RULES.register("SoftmaxGrad", "LogSoftmaxGrad")
def softmax_grad(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    y, dy = tensor(args[0], "y"), tensor(args[1], "dy")
    _float(y, "y")
    _same("dy", y, dy)
    if not -max(y.rank, 1) <= attrs["axis"] < max(y.rank, 1):
        raise fail(f"axis {attrs['axis']} is out of range for rank {y.rank}")
    return (y,)


@TYPE_RULES.register("BatchNormGrad")
def batch_norm_grad(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    x, scale, dy = (tensor(a, n) for a, n in zip(args, ("x", "scale", "dy")))
    same_dtype([x, scale, dy], op_type)
    _float(x, "x")
    _same("dy", x, dy)
    if x.rank < 2 or scale.shape != (x.shape[1],):
        raise fail(f"scale must have shape (C,) = ({x.shape[1] if x.rank > 1 else '?'},) for x "
                   f"{x.shape}, got {scale.shape}")
    return (x, scale, scale)
