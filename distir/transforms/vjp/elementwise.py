"""VJP rules of elementwise ops: arithmetic with numpy broadcasting (each operand's
gradient summed back to its shape), activations and casts.

Every rule returns one cotangent per input (``None`` where ``need`` is false or there is no
gradient); derivatives are written with the ops' own results where that saves work
(``Exp``, ``Sqrt``, ``Tanh``, ``Sigmoid`` reuse ``y``).
"""

from __future__ import annotations

import math

from distir.ir.core import Value
from distir.transforms.vjp import VJP_RULES, VJPContext


def _to(cx: VJPContext, g: Value, i: int) -> Value:
    """``g`` (shaped like the result) summed back to input ``i``'s shape."""
    return cx.sum_to(g, cx.ty().shape, cx.tx(i).shape)


@VJP_RULES.register("Add", "Sum")
def add(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    d = douts[0]
    return tuple(_to(cx, d, i) if n else None for i, n in enumerate(need))


@VJP_RULES.register("Sub")
def sub(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    d = douts[0]
    return (_to(cx, d, 0) if need[0] else None,
            _to(cx, cx.emit("Neg", d), 1) if need[1] else None)


@VJP_RULES.register("Mul")
def mul(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    d = douts[0]
    return (_to(cx, cx.mul(d, cx.x(1)), 0) if need[0] else None,
            _to(cx, cx.mul(d, cx.x(0)), 1) if need[1] else None)


@VJP_RULES.register("Div")
def div(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    q = cx.emit("Div", douts[0], cx.x(1))  # d / b
    gb = None
    if need[1]:  # -d * a / b^2 = -(d / b) * y
        gb = _to(cx, cx.emit("Neg", cx.mul(q, cx.y())), 1)
    return (_to(cx, q, 0) if need[0] else None, gb)


@VJP_RULES.register("Neg")
def neg(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    return (cx.emit("Neg", douts[0]),)


@VJP_RULES.register("Identity")
def identity(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    return (douts[0],)


@VJP_RULES.register("Dropout")
def dropout(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    """The identity in inference mode (``training_mode`` omitted or false); in training mode
    the gradient is masked and scaled like the data, which needs the mask result."""
    mode = cx.known(2)
    training = cx.has(2) and (mode is None or bool(mode.reshape(-1)[0]))
    if not training:
        return (douts[0], None, None)[:cx.n_in]
    if len(cx.op.outputs) < 2:
        raise cx.fail("Dropout in training mode needs its mask result to be named (a model "
                      "exported in training mode, as torch's dynamo exporter does without "
                      "model.eval(): export it after model.eval())")
    ratio = cx.known(1)
    r = 0.5 if not cx.has(1) else None if ratio is None else float(ratio.reshape(-1)[0])
    if r is None:
        raise cx.fail("the Dropout ratio must be known before the step")
    t = cx.tx(0)
    mask = cx.emit("Cast", cx.y(1), to=t.dtype)
    g = cx.mul(cx.mul(douts[0], mask), cx.scalar(1.0 / (1.0 - r), t))
    return (g, None, None)[:cx.n_in]


@VJP_RULES.register("Cast")
def cast(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    t = cx.tx(0)
    if not t.dtype.is_float:
        return (None,)
    return (cx.emit("Cast", douts[0], to=t.dtype),)


@VJP_RULES.register("Pow")
def pow_(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    d, a = douts[0], cx.x(0)
    ta = cx.tx(0)
    ga = gb = None
    if need[0]:
        e = cx.known(1)
        if e is not None and e.size == 1:
            ev = float(e.reshape(-1)[0])
            if ev == 2.0:
                slope = cx.mul(a, cx.scalar(2.0, ta))
            elif ev == 1.0:
                slope = cx.scalar(1.0, ta)
            else:
                slope = cx.mul(cx.emit("Pow", a, cx.scalar(ev - 1.0, ta)), cx.scalar(ev, ta))
        else:
            eb = cx.x(1) if cx.tx(1).dtype == ta.dtype else cx.emit("Cast", cx.x(1),
                                                                     to=ta.dtype)
            slope = cx.mul(cx.emit("Pow", a, cx.emit("Sub", eb, cx.scalar(1.0, ta))), eb)
        ga = _to(cx, cx.mul(d, slope), 0)
    if need[1]:
        gb = _to(cx, cx.mul(cx.mul(d, cx.y()), cx.emit("Log", a)), 1)
    return (ga, gb)


@VJP_RULES.register("Sqrt")
def sqrt(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    return (cx.emit("Div", cx.mul(douts[0], cx.scalar(0.5, cx.ty())), cx.y()),)


@VJP_RULES.register("Exp")
def exp(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    return (cx.mul(douts[0], cx.y()),)


@VJP_RULES.register("Log")
def log(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    return (cx.emit("Div", douts[0], cx.x(0)),)


@VJP_RULES.register("Reciprocal")
def reciprocal(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    y = cx.y()
    return (cx.emit("Neg", cx.mul(douts[0], cx.mul(y, y))),)


@VJP_RULES.register("Erf")
def erf(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    x, t = cx.x(0), cx.tx(0)
    g = cx.emit("Exp", cx.emit("Neg", cx.mul(x, x)))
    return (cx.mul(douts[0], cx.mul(g, cx.scalar(2.0 / math.sqrt(math.pi), t))),)


@VJP_RULES.register("Tanh")
def tanh(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    y, t = cx.y(), cx.ty()
    return (cx.mul(douts[0], cx.emit("Sub", cx.scalar(1.0, t), cx.mul(y, y))),)


@VJP_RULES.register("Sigmoid")
def sigmoid(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    y, t = cx.y(), cx.ty()
    return (cx.mul(douts[0], cx.mul(y, cx.emit("Sub", cx.scalar(1.0, t), y))),)


@VJP_RULES.register("Softplus")
def softplus(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    return (cx.mul(douts[0], cx.emit("Sigmoid", cx.x(0))),)


@VJP_RULES.register("Sin")
def sin(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    return (cx.mul(douts[0], cx.emit("Cos", cx.x(0))),)


@VJP_RULES.register("Cos")
def cos(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    return (cx.emit("Neg", cx.mul(douts[0], cx.emit("Sin", cx.x(0)))),)


@VJP_RULES.register("Relu")
def relu(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    return (cx.emit("ReluGrad", cx.x(0), douts[0]),)


@VJP_RULES.register("Gelu")
def gelu(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    return (cx.emit("GeluGrad", cx.x(0), douts[0], approximate=cx.attrs["approximate"]),)


@VJP_RULES.register("LeakyRelu")
def leaky_relu(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    x, t, d = cx.x(0), cx.tx(0), douts[0]
    pos = cx.emit("Greater", x, cx.scalar(0.0, t))
    return (cx.emit("Where", pos, d, cx.mul(d, cx.scalar(float(cx.attrs["alpha"]), t))),)


@VJP_RULES.register("HardSwish")
def hard_swish(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    """``x * clip(x / 6 + 1/2, 0, 1)``: slope 0 below -3, 1 above 3, ``x / 3 + 1/2`` between
    (PyTorch's convention at the two kinks)."""
    x, t, d = cx.x(0), cx.tx(0), douts[0]
    mid = cx.emit("Add", cx.mul(x, cx.scalar(1.0 / 3.0, t)), cx.scalar(0.5, t))
    upper = cx.emit("Where", cx.emit("Greater", x, cx.scalar(3.0, t)), cx.scalar(1.0, t), mid)
    slope = cx.emit("Where", cx.emit("Less", x, cx.scalar(-3.0, t)), cx.scalar(0.0, t), upper)
    return (cx.mul(d, slope),)


@VJP_RULES.register("Abs")
def abs_(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    x, t, d = cx.x(0), cx.tx(0), douts[0]
    return (cx.emit("Where", cx.emit("Less", x, cx.scalar(0.0, t)), cx.emit("Neg", d), d),)


@VJP_RULES.register("Clip", "Max", "Min")
def pass_where_equal(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    """The gradient flows to the operand the result equals (``Clip``: where ``x`` was not
    clipped; ``Max``/``Min``: to every operand equal to the result)."""
    d, y, t = douts[0], cx.y(), cx.ty()
    zero = cx.scalar(0.0, t)
    out: list[Value | None] = []
    for i, n in enumerate(need):
        if not n or (cx.op.op_type == "Clip" and i > 0):
            out.append(None)
            continue
        g = cx.emit("Where", cx.emit("Equal", cx.x(i), y), d, zero)
        out.append(_to(cx, g, i))
    return tuple(out)


@VJP_RULES.register("Where")
def where(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    d, c = douts[0], cx.x(0)
    zero = cx.scalar(0.0, cx.ty())
    return (None,
            _to(cx, cx.emit("Where", c, d, zero), 1) if need[1] else None,
            _to(cx, cx.emit("Where", c, zero, d), 2) if need[2] else None)


@VJP_RULES.register("HardSigmoid")
def hard_sigmoid(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    """``alpha`` where the result is strictly between 0 and 1, else 0."""
    y, t, d = cx.y(), cx.ty(), douts[0]
    inside = cx.emit("And", cx.emit("Greater", y, cx.scalar(0.0, t)),
                     cx.emit("Less", y, cx.scalar(1.0, t)))
    g = cx.mul(d, cx.scalar(float(cx.attrs["alpha"]), t))
    return (cx.emit("Where", inside, g, cx.scalar(0.0, t)),)


@VJP_RULES.register("Elu", "Selu")
def elu(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    """``Elu``: ``d`` for ``x > 0``, else ``d * (y + alpha)``; ``Selu``: ``d * gamma``, else
    ``d * (y + alpha * gamma)``."""
    x, y, t, d = cx.x(0), cx.y(), cx.tx(0), douts[0]
    alpha = float(cx.attrs["alpha"])
    gamma = float(cx.attrs.get("gamma", 1.0)) if cx.op.op_type == "Selu" else 1.0
    pos = cx.emit("Greater", x, cx.scalar(0.0, t))
    up = d if gamma == 1.0 else cx.mul(d, cx.scalar(gamma, t))
    down = cx.mul(d, cx.emit("Add", y, cx.scalar(alpha * gamma, t)))
    return (cx.emit("Where", pos, up, down),)


@VJP_RULES.register("Mish")
def mish(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    """``tanh(sp) + x * sigmoid(x) * (1 - tanh(sp)^2)`` with ``sp = softplus(x)``."""
    x, t = cx.x(0), cx.tx(0)
    th = cx.emit("Tanh", cx.emit("Softplus", x))
    rest = cx.mul(cx.mul(x, cx.emit("Sigmoid", x)),
                  cx.emit("Sub", cx.scalar(1.0, t), cx.mul(th, th)))
    return (cx.mul(douts[0], cx.emit("Add", th, rest)),)


@VJP_RULES.register("PRelu")
def prelu(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    x, t, d = cx.x(0), cx.tx(0), douts[0]
    zero = cx.scalar(0.0, t)
    pos = cx.emit("Greater", x, zero)
    gx = gs = None
    if need[0]:
        gx = _to(cx, cx.emit("Where", pos, d, cx.mul(d, cx.x(1))), 0)
    if need[1]:
        gs = _to(cx, cx.emit("Where", pos, zero, cx.mul(d, x)), 1)
    return (gx, gs)


@VJP_RULES.register("Atan")
def atan(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    x, t = cx.x(0), cx.tx(0)
    return (cx.emit("Div", douts[0], cx.emit("Add", cx.scalar(1.0, t), cx.mul(x, x))),)


@VJP_RULES.register("CastLike")
def cast_like(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    t = cx.tx(0)
    return (cx.emit("Cast", douts[0], to=t.dtype) if t.dtype.is_float else None, None)


@VJP_RULES.register("Floor", "Ceil", "Round", "Sign")
def piecewise_constant(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    """Piecewise constant: the gradient is zero almost everywhere (PyTorch's convention),
    so nothing flows back."""
    return (None,) * len(need)


def _one_plus(cx: VJPContext, v: Value, sign: float = 1.0) -> Value:
    """``1 + sign * v`` in the input's dtype."""
    one = cx.scalar(1.0, cx.tx(0))
    return cx.emit("Add" if sign > 0 else "Sub", one, v)


@VJP_RULES.register("Tan", "Sinh", "Cosh", "Asin", "Acos", "Asinh", "Acosh", "Atanh")
def trigonometric(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    """``1 + y^2``, ``cosh x``, ``sinh x``, ``±1 / sqrt(1 - x^2)``, ``1 / sqrt(x^2 ± 1)``,
    ``1 / (1 - x^2)``."""
    x, d, op = cx.x(0), douts[0], cx.op.op_type
    if op == "Tan":
        y = cx.y()
        return (cx.mul(d, _one_plus(cx, cx.mul(y, y))),)
    if op in ("Sinh", "Cosh"):
        return (cx.mul(d, cx.emit("Cosh" if op == "Sinh" else "Sinh", x)),)
    sq = cx.mul(x, x)
    if op in ("Asin", "Acos"):
        g = cx.emit("Div", d, cx.emit("Sqrt", _one_plus(cx, sq, -1.0)))
        return (g if op == "Asin" else cx.emit("Neg", g),)
    if op == "Asinh":
        return (cx.emit("Div", d, cx.emit("Sqrt", _one_plus(cx, sq))),)
    if op == "Acosh":
        return (cx.emit("Div", d, cx.emit("Sqrt", cx.emit("Sub", sq, cx.scalar(1.0, cx.tx(0))))),)
    return (cx.emit("Div", d, _one_plus(cx, sq, -1.0)),)


@VJP_RULES.register("Celu")
def celu(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    """``d`` above 0, else ``d * (y / alpha + 1)`` (``exp(x / alpha)``)."""
    x, t, d = cx.x(0), cx.tx(0), douts[0]
    alpha = float(cx.attrs["alpha"])
    slope = _one_plus(cx, cx.mul(cx.y(), cx.scalar(1.0 / alpha, t)))
    return (cx.emit("Where", cx.emit("Greater", x, cx.scalar(0.0, t)), d, cx.mul(d, slope)),)


@VJP_RULES.register("Softsign")
def softsign(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    den = _one_plus(cx, cx.emit("Abs", cx.x(0)))
    return (cx.emit("Div", douts[0], cx.mul(den, den)),)


@VJP_RULES.register("ThresholdedRelu", "Shrink")
def thresholded(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    """The cotangent where the input passed (``x > alpha``; ``|x| > lambd``), else 0."""
    x, t, d = cx.x(0), cx.tx(0), douts[0]
    if cx.op.op_type == "ThresholdedRelu":
        on = cx.emit("Greater", x, cx.scalar(float(cx.attrs["alpha"]), t))
    else:
        on = cx.emit("Greater", cx.emit("Abs", x), cx.scalar(float(cx.attrs["lambd"]), t))
    return (cx.emit("Where", on, d, cx.scalar(0.0, t)),)


@VJP_RULES.register("Mean")
def mean(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    d = cx.mul(douts[0], cx.scalar(1.0 / cx.n_in, cx.ty()))
    return tuple(_to(cx, d, i) if n else None for i, n in enumerate(need))


VJP_RULES.register("Hardmax")(piecewise_constant)
