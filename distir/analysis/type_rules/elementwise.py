"""Type rules of elementwise ops: unary, broadcasting binary and variadic, comparisons."""

from __future__ import annotations

from typing import Any

from distir.analysis.rules import TYPE_RULES
from distir.analysis.type_rules._util import broadcast_shapes, fail, same_dtype, tensor
from distir.analysis.values import Concrete
from distir.errors import TypeInferenceError
from distir.ir.types import DType, TensorType

UNARY = ("Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Relu", "Sigmoid", "Tanh", "Erf",
         "Gelu", "Floor", "Ceil", "Sin", "Cos", "LeakyRelu", "Softplus", "Identity", "Clip",
         "HardSwish", "HardSigmoid", "Mish", "Selu", "Elu", "Round", "Atan", "Sign", "Tan",
         "Asin", "Acos", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Softsign", "Celu",
         "ThresholdedRelu", "Shrink", "BitwiseNot")
BINARY = ("Add", "Sub", "Mul", "Div", "Pow", "Mod", "BitwiseAnd", "BitwiseOr", "BitwiseXor")
VARIADIC = ("Sum", "Max", "Min", "Mean")
COMPARE = ("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual")
LOGICAL = ("And", "Or", "Xor")


@TYPE_RULES.register(*UNARY)
def unary(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    return (tensor(args[0]),)


@TYPE_RULES.register("Not")
def not_(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    t = tensor(args[0])
    if t.dtype is not DType.Bool:
        raise fail(f"needs a Bool tensor, got {t.dtype.value}")
    return (t,)


@TYPE_RULES.register("IsNaN", "IsInf")
def isnan(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    t = tensor(args[0])
    return (TensorType(DType.Bool, t.shape, t.device),)


def _broadcast(op_type: str, args: tuple) -> tuple[list[TensorType], tuple[int, ...]]:
    ts = []
    for i, a in enumerate(args):  # hot: no message is formatted unless an input is bad
        if a is None:
            continue
        t = a.type if isinstance(a, Concrete) else a
        if not isinstance(t, TensorType):
            raise fail(f"input {i} must be a tensor, got {t}")
        ts.append(t)
    s0 = ts[0].shape
    for t in ts:
        if t.shape != s0:
            return ts, broadcast_shapes(*(t.shape for t in ts))
    return ts, s0


@TYPE_RULES.register(*BINARY, *VARIADIC)
def binary(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    ts, shape = _broadcast(op_type, args)
    t0 = ts[0]
    if op_type == "Pow":  # the exponent may have another dtype
        dt = t0.dtype
    else:
        dt = same_dtype(ts, op_type)
        if op_type == "Mod" and dt.is_float and not attrs.get("fmod", 0):
            raise fail(f"on {dt.value} needs fmod=1 (C fmod); fmod=0 is for integers")
    return (t0 if shape == t0.shape else TensorType(dt, shape, t0.device),)


@TYPE_RULES.register(*COMPARE, *LOGICAL)
def compare(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    ts, shape = _broadcast(op_type, args)
    same_dtype(ts, op_type)
    return (TensorType(DType.Bool, shape, ts[0].device),)


@TYPE_RULES.register("Where")
def where(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    c, x, y = (tensor(a) for a in args)
    if c.dtype is not DType.Bool:
        raise fail(f"the condition must be Bool, got {c.dtype.value}")
    dt = same_dtype([x, y], op_type)
    return (TensorType(dt, broadcast_shapes(c.shape, x.shape, y.shape), x.device),)


@TYPE_RULES.register("Cast")
def cast(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    t = tensor(args[0])
    to = attrs["to"]
    if not isinstance(to, DType):
        raise fail("attribute to must be a dtype (to=Float16)")
    return (TensorType(to, t.shape, t.device),)


@TYPE_RULES.register("Dropout")
def dropout(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    t = tensor(args[0])
    if n_out == 2:
        return (t, TensorType(DType.Bool, t.shape, t.device))
    return (t,)


@TYPE_RULES.register("PRelu")
def prelu(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    """``slope`` broadcasts to ``X`` one way: the result has X's type."""
    x, slope = tensor(args[0], "X"), tensor(args[1], "slope")
    same_dtype([x, slope], op_type)
    try:
        ok = broadcast_shapes(x.shape, slope.shape) == x.shape
    except TypeInferenceError:
        ok = False
    if not ok:
        raise fail(f"slope of shape {slope.shape} does not broadcast to X {x.shape}")
    return (x,)


@TYPE_RULES.register("CastLike")
def cast_like(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    """The input, cast to the dtype of ``target_type`` (whose values are unused)."""
    t, like = tensor(args[0]), tensor(args[1], "target_type")
    return (TensorType(like.dtype, t.shape, t.device),)
