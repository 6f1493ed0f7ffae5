"""VJP rules of the neural-network ops: products, convolution, normalization, softmax,
pooling.

``MatMul``/``Gemm`` use the gradient ops ``MatMulGrad``/``GemmGrad`` (a result nobody reads
is not computed); ``Conv``, ``MaxPool`` and ``AveragePool`` use ``ConvGrad``,
``MaxPoolGrad`` and ``AveragePoolGrad`` (there is no composite of forward ops for them),
with padding resolved to explicit ``pads`` from the static shapes. ``LayerNormalization``,
``Softmax`` and ``LogSoftmax`` use ``LayerNormGrad``, ``SoftmaxGrad`` and
``LogSoftmaxGrad`` (one kernel each, where the composite of forward ops would be nine to
seventeen); ``BatchNormalization`` uses ``BatchNormGrad`` in training mode and is an
affine map otherwise.
"""

from __future__ import annotations

from typing import Any

from distir.errors import TransformError
from distir.ir.core import Value
from distir.ir.padding import explicit_pads
from distir.transforms.vjp import VJP_RULES, VJPContext


@VJP_RULES.register("MatMul")
def matmul(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    da, db = cx.emit("MatMulGrad", cx.x(0), cx.x(1), douts[0])
    return (da if need[0] else None, db if need[1] else None)


@VJP_RULES.register("Gemm")
def gemm(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    a = {k: cx.attrs[k] for k in ("alpha", "beta", "transA", "transB")}
    if len(need) > 2 and need[2]:
        da, db, dc = cx.emit("GemmGrad", cx.x(0), cx.x(1), cx.x(2), douts[0], n=3, **a)
        return (da if need[0] else None, db if need[1] else None, dc)
    if not (need[0] or need[1]):
        return (None,) * len(need)
    da, db = cx.emit("GemmGrad", cx.x(0), cx.x(1), douts[0], n=2, **a)
    return (da if need[0] else None, db if need[1] else None) + (None,) * (len(need) - 2)


def spatial(cx: VJPContext, kernel: list[int]) -> dict[str, Any]:
    """Strides, dilations and explicit begin/end ``pads`` of a conv or pool, with
    ``auto_pad`` resolved from the input's static shape."""
    x = cx.tx(0)
    n = x.rank - 2
    strides = list(cx.attrs.get("strides") or [1] * n)
    dil = list(cx.attrs.get("dilations") or [1] * n)
    pads = explicit_pads(x.shape[2:], kernel, strides, dil, cx.attrs.get("pads"),
                         cx.attrs.get("auto_pad", "NOTSET"))
    return {"strides": strides, "dilations": dil, "pads": pads}


@VJP_RULES.register("Conv")
def conv(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    w = cx.tx(1)
    sp = spatial(cx, list(cx.attrs.get("kernel_shape") or w.shape[2:]))
    d = douts[0]
    gx = gw = gb = None
    if need[0] or need[1]:
        gx, gw = cx.emit("ConvGrad", cx.x(0), cx.x(1), d, group=int(cx.attrs["group"]), **sp)
    if len(need) > 2 and need[2]:
        gb = cx.reduce_sum(d, [0] + list(range(2, cx.ty().rank)), keepdims=False)
    return (gx if need[0] else None, gw if need[1] else None, gb)[:len(need)]


@VJP_RULES.register("ConvTranspose")
def conv_transpose(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    """A transposed convolution is a convolution's input gradient, with the same weight
    (``(C, M / group, k...)``, a convolution's from ``M`` channels to ``C``), strides and
    dilations, cut from its unpadded result (``conv_transpose_geometry``: from its begin
    pad, zero-extended past the end). So its input's gradient is that convolution of the
    output's gradient, padded back to the unpadded result (begin and end pads; what
    ``output_padding`` or ``output_shape`` adds past the end no window reads), its
    weight's the convolution's weight gradient (``ConvGrad`` of the output's gradient
    against the input, the input gradient unused), its bias's the output's gradient
    summed over the batch and the pixels."""
    from distir.analysis.numpy_rules.kernels import conv_transpose_geometry

    x, w, y = cx.tx(0), cx.tx(1), cx.ty()
    n = x.rank - 2
    full, begin, out, sd = conv_transpose_geometry(x.shape, w.shape, cx.attrs)
    strides, dil = sd[:n], sd[n:]
    end = [f - b - o for f, b, o in zip(full, begin, out, strict=True)]
    if min(begin) < 0 or any(-e >= s for e, s in zip(end, strides, strict=True)):
        raise cx.fail(f"ConvTranspose whose result (sizes {out}) reaches a stride or more "
                      f"past its unpadded result ({full}) or starts before it")
    sp: dict[str, Any] = {"strides": list(strides), "dilations": list(dil),
                          "pads": list(begin) + [max(e, 0) for e in end]}
    group = int(cx.attrs.get("group", 1))
    d = douts[0]
    gx = gw = gb = None
    if need[0]:
        gx = cx.emit("Conv", d, cx.x(1), group=group, kernel_shape=list(w.shape[2:]), **sp)
    if need[1]:
        _, gw = cx.emit("ConvGrad", d, cx.x(1), cx.x(0), group=group, **sp)
    if len(need) > 2 and need[2]:
        gb = cx.reduce_sum(d, [0] + list(range(2, y.rank)), keepdims=False)
    return (gx, gw, gb)[:len(need)]


@VJP_RULES.register("MaxPool")
def max_pool(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    kernel = list(cx.attrs["kernel_shape"])
    sp = spatial(cx, kernel)
    if douts[0] is None:
        raise cx.fail("only the pooled result of MaxPool has a gradient, not its indices")
    return (cx.emit("MaxPoolGrad", cx.x(0), douts[0], kernel_shape=kernel, **sp),)


@VJP_RULES.register("AveragePool")
def average_pool(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    kernel = list(cx.attrs["kernel_shape"])
    sp = spatial(cx, kernel)
    if any(v != 1 for v in sp.pop("dilations")):
        raise cx.fail("AveragePool with dilations")
    return (cx.emit("AveragePoolGrad", cx.x(0), douts[0], kernel_shape=kernel,
                    count_include_pad=int(cx.attrs.get("count_include_pad", 0)), **sp),)


@VJP_RULES.register("GlobalAveragePool")
def global_average_pool(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    x = cx.tx(0)
    count = 1
    for s in x.shape[2:]:
        count *= s
    g = cx.mul(douts[0], cx.scalar(1.0 / count, x))
    return (cx.emit("Expand", g, cx.ints(x.shape)),)


@VJP_RULES.register("Softmax", "LogSoftmax")
def softmax(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    """``SoftmaxGrad``: ``y * (d - sum(d * y))``; ``LogSoftmaxGrad``: ``d - exp(y) *
    sum(d)``, over the axis, from the result ``y``."""
    axis = int(cx.attrs["axis"]) % max(cx.ty().rank, 1)
    return (cx.emit(cx.op.op_type + "Grad", cx.y(), douts[0], axis=axis),)


def _mean(cx: VJPContext, v: Value, axes: list[int]) -> Value:
    return cx.emit("ReduceMean", v, cx.ints(axes), keepdims=1)


def _normalized_grad(cx: VJPContext, g: Value, xhat: Value, rstd: Value,
                     axes: list[int]) -> Value:
    """The input gradient of ``xhat = (x - mean(x)) * rstd`` (statistics over ``axes``) given
    ``g``, the cotangent of ``xhat``: ``rstd * (g - mean(g) - xhat * mean(g * xhat))``."""
    c = cx.emit("Sub", g, _mean(cx, g, axes))
    c = cx.emit("Sub", c, cx.mul(xhat, _mean(cx, cx.mul(g, xhat), axes)))
    return cx.mul(rstd, c)


def _stats(cx: VJPContext, axes: list[int], eps: float, x: Value | None = None,
           ) -> tuple[Value, Value]:
    """``(x - mean) * rstd`` and ``rstd`` of ``x`` (default: input 0) over ``axes``
    (biased variance)."""
    t = cx.tx(0)
    x = cx.x(0) if x is None else x
    xc = cx.emit("Sub", x, _mean(cx, x, axes))
    var = _mean(cx, cx.mul(xc, xc), axes)
    rstd = cx.emit("Reciprocal", cx.emit("Sqrt", cx.emit("Add", var, cx.scalar(eps, t))))
    return cx.mul(xc, rstd), rstd


@VJP_RULES.register("LayerNormalization")
def layer_norm(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    """``LayerNormGrad`` (statistics recomputed from ``x``); only the normalized result
    ``Y`` has a gradient."""
    d = douts[0]
    if d is None:
        raise cx.fail("only Y of LayerNormalization has a gradient, not its mean or "
                      "inverse standard deviation")
    x = cx.tx(0)
    axis = int(cx.attrs["axis"]) % x.rank
    dx, dscale, dbias = cx.emit("LayerNormGrad", cx.x(0), cx.x(1), d, axis=axis,
                                epsilon=float(cx.attrs["epsilon"]))
    out: list[Value | None] = [dx if need[0] else None, dscale if need[1] else None]
    if len(need) > 2:
        db = None
        if need[2]:
            b = cx.tx(2)
            db = dbias if b.shape == cx.tx(1).shape else cx.sum_to(d, x.shape, b.shape)
        out.append(db)
    return tuple(out)


@VJP_RULES.register("BatchNormalization")
def batch_norm(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    """In training mode the statistics are the batch's (over every axis but 1):
    ``BatchNormGrad``, and the running statistics get no gradient; in inference mode
    (an affine map) ``mean`` and ``var`` are inputs like any other and get their
    gradients."""
    x = cx.tx(0)
    d = douts[0]
    if d is None:
        raise cx.fail("only Y of BatchNormalization has a gradient, not its running "
                      "statistics")
    eps = float(cx.attrs["epsilon"])
    if int(cx.attrs.get("training_mode", 0)):
        dx, dscale, dbias = cx.emit("BatchNormGrad", cx.x(0), cx.x(1), d, epsilon=eps)
        return (dx if need[0] else None, dscale if need[1] else None,
                dbias if need[2] else None) + (None,) * (len(need) - 3)
    axes = [0] + list(range(2, x.rank))
    chan = (x.shape[1],) + (1,) * (x.rank - 2)
    scale = cx.reshape(cx.x(1), chan)
    out: list[Value | None] = [None] * len(need)
    var = cx.reshape(cx.x(4), chan)
    rstd = cx.emit("Reciprocal", cx.emit("Sqrt", cx.emit("Add", var, cx.scalar(eps, x))))
    xc = cx.emit("Sub", cx.x(0), cx.reshape(cx.x(3), chan))
    xhat = cx.mul(xc, rstd)
    if need[0]:
        out[0] = cx.mul(d, cx.mul(scale, rstd))
    if need[3]:
        g = cx.emit("Neg", cx.mul(cx.reduce_sum(d, axes, True), cx.mul(scale, rstd)))
        out[3] = cx.reshape(g, (x.shape[1],))
    if need[4]:  # d/dvar of rstd is -rstd^3 / 2
        r3 = cx.mul(rstd, cx.mul(rstd, rstd))
        g = cx.mul(cx.reduce_sum(cx.mul(d, xc), axes, True),
                   cx.mul(scale, cx.mul(r3, cx.scalar(-0.5, x))))
        out[4] = cx.reshape(g, (x.shape[1],))
    if need[1]:
        out[1] = cx.reshape(cx.reduce_sum(cx.mul(d, xhat), axes, False), (x.shape[1],))
    if need[2]:
        out[2] = cx.reshape(cx.reduce_sum(d, axes, False), (x.shape[1],))
    return tuple(out)


@VJP_RULES.register("MSELoss")
def mse_loss(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    """``MSELossGrad`` (``p - y``, scaled for ``reduction="mean"``) times the cotangent."""
    g = cx.times(cx.emit("MSELossGrad", cx.x(0), cx.x(1), reduction=cx.attrs["reduction"]),
                 douts[0])
    return (g if need[0] else None, cx.emit("Neg", g) if need[1] else None)


@VJP_RULES.register("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    g = cx.emit("SoftmaxCrossEntropyLossGrad", cx.x(0), cx.x(1),
                reduction=cx.attrs["reduction"])
    return (cx.times(g, douts[0]), None)


@VJP_RULES.register("InstanceNormalization", "GroupNormalization")
def group_norm(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    """Statistics per sample over each group of channels and the spatial axes
    (``InstanceNormalization``: one channel per group), recomputed from ``x`` seen as
    ``(N, groups, -1)``; the per-channel scale and bias get sums over every other axis."""
    x = cx.tx(0)
    n, c = x.shape[0], x.shape[1]
    groups = c if cx.op.op_type == "InstanceNormalization" else int(cx.attrs["num_groups"])
    eps = float(cx.attrs["epsilon"])
    d = douts[0]
    grouped = (n, groups, x.numel // (n * groups))
    chan = (c,) + (1,) * (x.rank - 2)
    xhat_g, rstd = _stats(cx, [2], eps, cx.reshape(cx.x(0), grouped))
    out: list[Value | None] = [None] * len(need)
    if need[0]:
        g = cx.reshape(cx.mul(d, cx.reshape(cx.x(1), chan)), grouped)
        out[0] = cx.reshape(_normalized_grad(cx, g, xhat_g, rstd, [2]), x.shape)
    axes = [0] + list(range(2, x.rank))
    if need[1]:
        xhat = cx.reshape(xhat_g, x.shape)
        out[1] = cx.reshape(cx.reduce_sum(cx.mul(d, xhat), axes, False), (c,))
    if need[2]:
        out[2] = cx.reshape(cx.reduce_sum(d, axes, False), (c,))
    return tuple(out)


def _einsum_terms(eq: str, n_in: int) -> tuple[list[str], str]:
    """The input subscripts and the output subscripts of an ``Einsum`` equation (implicit
    output: the letters used once, in alphabetical order, after any ellipsis)."""
    eq = eq.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    ins = lhs.split(",")
    if len(ins) != n_in:
        raise TransformError(f"Einsum equation {eq!r} has {len(ins)} operands, "
                             f"{n_in} given")
    if not arrow:
        letters = [ch for term in ins for ch in term.replace("...", "")]
        once = sorted(ch for ch in set(letters) if letters.count(ch) == 1)
        out = ("..." if "..." in lhs else "") + "".join(once)
    return ins, out


@VJP_RULES.register("Einsum")
def einsum(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    """Operand ``i``'s gradient is the ``Einsum`` of the cotangent with the other operands
    onto ``i``'s subscripts; letters only ``i`` has (summed away inside it) are restored
    with ``Expand``. Repeated letters within an operand (diagonals) are not supported."""
    ins, out = _einsum_terms(str(cx.attrs["equation"]), cx.n_in)
    grads: list[Value | None] = []
    for i, n in enumerate(need):
        if not n:
            grads.append(None)
            continue
        term = ins[i]
        plain = term.replace("...", "")
        if len(set(plain)) != len(plain):
            raise cx.fail(f"Einsum operand {term!r} repeats a subscript (a diagonal)")
        others = [t for j, t in enumerate(ins) if j != i]
        seen = set(out) | {ch for t in others for ch in t}
        kept = "".join(ch for ch in plain if ch in seen)
        missing = [k for k, ch in enumerate(plain) if ch not in seen]
        if missing and "..." in term:
            raise cx.fail(f"Einsum operand {term!r} sums a subscript of its own beside an "
                          "ellipsis")
        target = term if not missing else kept
        eq = ",".join([out] + others) + "->" + target
        g = cx.emit("Einsum", douts[0], *[cx.x(j) for j in range(cx.n_in) if j != i],
                    equation=eq)
        if missing:
            g = cx.emit("Unsqueeze", g, cx.ints(missing))
            g = cx.emit("Expand", g, cx.ints(cx.tx(i).shape))
        grads.append(g)
    return tuple(grads)


@VJP_RULES.register("GlobalMaxPool")
def global_max_pool(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    """To every element equal to its channel's maximum."""
    x = cx.tx(0)
    shape = cx.ints(x.shape)
    hit = cx.emit("Equal", cx.x(0), cx.emit("Expand", cx.y(), shape))
    return (cx.emit("Where", hit, cx.emit("Expand", douts[0], shape), cx.scalar(0.0, x)),)


@VJP_RULES.register("LpNormalization")
def lp_normalization(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    """``y = x / |x|_p`` over ``axis``: ``(d - y * sum(d * y)) / |x|_2`` for ``p = 2``;
    ``d / |x|_1 - sign(x) * sum(d * y) / |x|_1`` for ``p = 1``."""
    x, d, y = cx.x(0), douts[0], cx.y()
    t = cx.tx(0)
    axis = int(cx.attrs["axis"]) % t.rank
    p = int(cx.attrs["p"])
    if p not in (1, 2):
        raise cx.fail(f"LpNormalization with p={p}")
    dy_y = cx.reduce_sum(cx.mul(d, y), [axis], keepdims=True)
    if p == 2:
        norm = cx.emit("ReduceL2", x, cx.ints([axis]), keepdims=1)
        return (cx.emit("Div", cx.emit("Sub", d, cx.mul(y, dy_y)), norm),)
    norm = cx.emit("ReduceL1", x, cx.ints([axis]), keepdims=1)
    return (cx.emit("Div", cx.emit("Sub", d, cx.mul(cx.emit("Sign", x), dy_y)), norm),)


@VJP_RULES.register("MeanVarianceNormalization")
def mean_variance_normalization(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    """``y = xc / (s + 1e-9)`` with ``xc = x - mean(x)``, ``s = sqrt(mean(xc^2))`` over
    ``axes`` (ONNX's definition): ``dx = (g - mean(g)) / (s + e) - xc * mean(g * xc) /
    ((s + e)^2 s)``."""
    t = cx.tx(0)
    axes = sorted(int(a) % t.rank for a in cx.attrs["axes"])
    x, g = cx.x(0), douts[0]
    xc = cx.emit("Sub", x, _mean(cx, x, axes))
    s = cx.emit("Sqrt", _mean(cx, cx.mul(xc, xc), axes))
    se = cx.emit("Add", s, cx.scalar(1e-9, t))
    first = cx.emit("Div", cx.emit("Sub", g, _mean(cx, g, axes)), se)
    second = cx.emit("Div", cx.mul(xc, _mean(cx, cx.mul(g, xc), axes)),
                     cx.mul(cx.mul(se, se), s))
    return (cx.emit("Sub", first, second),)
