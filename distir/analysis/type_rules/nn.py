"""Type rules of neural-network ops: MatMul, Gemm, Conv, pooling, normalization, softmax,
reductions.

Semantics are ONNX opset 21's; every result lives on the device of the inputs. Spatial ops
take ``(N, C, D1, ..., Dn)`` inputs; their output sizes follow the ONNX formulas:

- explicit pads: ``floor((D + pad_begin + pad_end - ((k - 1) * dilation + 1)) / stride) + 1``
  (``ceil`` with ``ceil_mode``, dropping a last window that would start in the end padding);
- ``SAME_UPPER``/``SAME_LOWER``: ``ceil(D / stride)``;
- ``VALID``: ``floor((D - ((k - 1) * dilation + 1)) / stride) + 1``.
"""

from __future__ import annotations

from typing import Any

from distir.analysis.rules import TYPE_RULES
from distir.analysis.type_rules._util import (
    broadcast_shapes,
    const_ints,
    fail,
    norm_axes,
    norm_axis,
    same_dtype,
    tensor,
)
from distir.errors import TypeInferenceError
from distir.ir.types import DType, TensorType

# ONNX TensorProto codes of the stash types LayerNormalization accepts.
STASH_TYPES = {1: DType.Float32, 10: DType.Float16, 11: DType.Float64, 16: DType.BFloat16}
"""The float type codes a normalization's ``stash_type`` may name, as dtypes."""


# --- Matrix products ---------------------------------------------------------------------------

@TYPE_RULES.register("MatMul")
def matmul(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    """numpy.matmul: a 1-D left operand gains (and loses) a leading 1, a 1-D right operand a
    trailing 1; batch dimensions broadcast."""
    a, b = tensor(args[0], "A"), tensor(args[1], "B")
    if a.rank == 0 or b.rank == 0:
        raise fail(f"operands must have rank >= 1, got {a.shape} @ {b.shape}")
    dt = same_dtype([a, b], op_type)
    sa = (1,) + a.shape if a.rank == 1 else a.shape
    sb = b.shape + (1,) if b.rank == 1 else b.shape
    if sa[-1] != sb[-2]:
        raise fail(f"inner dimensions differ: {a.shape} @ {b.shape}")
    try:
        batch = broadcast_shapes(sa[:-2], sb[:-2])
    except TypeInferenceError:
        raise fail(f"batch dimensions do not broadcast: {a.shape} @ {b.shape}") from None
    shape = batch + ((sa[-2],) if a.rank > 1 else ()) + ((sb[-1],) if b.rank > 1 else ())
    return (TensorType(dt, shape, a.device),)


@TYPE_RULES.register("Gemm")
def gemm(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    """``alpha * A' @ B' + beta * C`` with A' = A or A^T (``transA``), likewise B; C is
    unidirectionally broadcast to ``(M, N)``."""
    a, b = tensor(args[0], "A"), tensor(args[1], "B")
    if a.rank != 2 or b.rank != 2:
        raise fail(f"A and B must be matrices, got {a.shape} and {b.shape}")
    ts = [a, b]
    m, k = a.shape[::-1] if attrs.get("transA", 0) else a.shape
    k2, n = b.shape[::-1] if attrs.get("transB", 0) else b.shape
    if k != k2:
        raise fail(f"inner dimensions differ: {a.shape} @ {b.shape} (transA="
                   f"{attrs.get('transA', 0)}, transB={attrs.get('transB', 0)})")
    if len(args) > 2 and args[2] is not None:
        c = tensor(args[2], "C")
        ts.append(c)
        if c.rank > 2 or any(x not in (1, y) for x, y in zip(c.shape[::-1], (n, m), strict=False)):
            raise fail(f"C of shape {c.shape} does not broadcast to the result {(m, n)}")
    return (TensorType(same_dtype(ts, op_type), (m, n), a.device),)


# --- Convolution and pooling -------------------------------------------------------------------

def _spatial_ints(attrs: dict[str, Any], name: str, n: int, default: int) -> tuple[int, ...]:
    v = attrs.get(name)
    if v is None:
        return (default,) * n
    v = tuple(v)
    if len(v) != n:
        raise fail(f"{name} {list(v)} must have {n} entries, one per spatial axis")
    if any(x < 1 for x in v):
        raise fail(f"{name} {list(v)} must be positive")
    return v


def spatial_out(shape: tuple[int, ...], kernel: tuple[int, ...], attrs: dict[str, Any],
                ceil_mode: bool) -> tuple[int, ...]:
    """The output spatial sizes of a convolution or pooling over the spatial axes of an
    input of ``shape`` (``[N, C, D1, ...]``)."""
    spatial = shape[2:]
    n = len(spatial)
    strides = _spatial_ints(attrs, "strides", n, 1)
    dilations = _spatial_ints(attrs, "dilations", n, 1)
    auto_pad = attrs.get("auto_pad", "NOTSET")
    eff = [(k - 1) * d + 1 for k, d in zip(kernel, dilations, strict=False)]
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        return tuple(-(-d // s) for d, s in zip(spatial, strides, strict=False))
    if auto_pad == "VALID":
        pads: tuple[int, ...] = (0,) * (2 * n)
    elif auto_pad == "NOTSET":
        pads = tuple(attrs.get("pads") or (0,) * (2 * n))
        if len(pads) != 2 * n or any(p < 0 for p in pads):
            raise fail(f"pads {list(pads)} must have {2 * n} non-negative entries (the begins "
                       "of the spatial axes, then their ends)")
    else:
        raise fail(f"auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, got "
                   f"{auto_pad!r}")
    out = []
    for i, (d, s, e) in enumerate(zip(spatial, strides, eff, strict=False)):
        span = d + pads[i] + pads[n + i] - e
        o = (-(-span // s) if ceil_mode else span // s) + 1
        if span < 0 and o < 1:  # (ceil_mode keeps one window that starts in the input,
            # as PyTorch does: HF EfficientNet pools its 7 x 7 map with a window of 2560)
            raise fail(f"the window {kernel} (dilations {list(dilations)}) is larger than the "
                       f"padded input {shape}")
        if ceil_mode and (o - 1) * s >= d + pads[i]:
            o -= 1  # the last window would start in the end padding
        out.append(o)
    return tuple(out)


@TYPE_RULES.register("Conv")
def conv(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    x, w = tensor(args[0], "X"), tensor(args[1], "W")
    if x.rank < 3 or w.rank != x.rank:
        raise fail(f"X must be (N, C, D1, ...) and W (M, C/group, k1, ...) of the same rank, "
                   f"got {x.shape} and {w.shape}")
    ts = [x, w]
    group = attrs.get("group", 1)
    m = w.shape[0]
    if group < 1 or x.shape[1] != w.shape[1] * group or m % group:
        raise fail(f"channels do not match: X {x.shape} has {x.shape[1]}, W {w.shape} expects "
                   f"{w.shape[1]} per group x {group} groups (and M={m} divisible by group)")
    kernel = w.shape[2:]
    ks = attrs.get("kernel_shape")
    if ks is not None and tuple(ks) != kernel:
        raise fail(f"kernel_shape {list(ks)} differs from the kernel of W {w.shape}")
    if len(args) > 2 and args[2] is not None:
        b = tensor(args[2], "B")
        ts.append(b)
        if b.shape != (m,):
            raise fail(f"B must have shape {(m,)}, got {b.shape}")
    dt = same_dtype(ts, op_type)
    out = spatial_out(x.shape, kernel, attrs, False)
    return (TensorType(dt, (x.shape[0], m) + out, x.device),)


@TYPE_RULES.register("MaxPool", "AveragePool")
def pool(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    x = tensor(args[0], "X")
    kernel = attrs.get("kernel_shape")
    if x.rank < 3:
        raise fail(f"X must be (N, C, D1, ...), got {x.shape}")
    if kernel is None or len(kernel) != x.rank - 2:
        raise fail(f"kernel_shape {kernel} must have one entry per spatial axis of {x.shape}")
    out = spatial_out(x.shape, tuple(kernel), attrs, bool(attrs.get("ceil_mode", 0)))
    y = x.with_shape(x.shape[:2] + out)
    if n_out == 2:
        if op_type != "MaxPool":
            raise fail("has one result")
        return (y, TensorType(DType.Int64, y.shape, x.device))
    return (y,)


@TYPE_RULES.register("ConvTranspose")
def conv_transpose(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    """W is ``(C, M / group, k1, ...)``. Each spatial size is ``output_shape``'s when given,
    else ``stride * (d - 1) + output_padding + (k - 1) * dilation + 1 - pad_begin - pad_end``
    (``SAME_*``: ``d * stride``)."""
    x, w = tensor(args[0], "X"), tensor(args[1], "W")
    if x.rank < 3 or w.rank != x.rank:
        raise fail(f"X must be (N, C, D1, ...) and W (C, M/group, k1, ...) of the same rank, "
                   f"got {x.shape} and {w.shape}")
    ts = [x, w]
    group = attrs.get("group", 1)
    if group < 1 or w.shape[0] != x.shape[1] or x.shape[1] % group:
        raise fail(f"channels do not match: X {x.shape} has {x.shape[1]}, W {w.shape} expects "
                   f"{w.shape[0]} (and a multiple of group={group})")
    m = w.shape[1] * group
    if len(args) > 2 and args[2] is not None:
        b = tensor(args[2], "B")
        ts.append(b)
        if b.shape != (m,):
            raise fail(f"B must have shape {(m,)}, got {b.shape}")
    dt = same_dtype(ts, op_type)
    n = x.rank - 2
    kernel = w.shape[2:]
    ks = attrs.get("kernel_shape")
    if ks is not None and tuple(ks) != kernel:
        raise fail(f"kernel_shape {list(ks)} differs from the kernel of W {w.shape}")
    strides = _spatial_ints(attrs, "strides", n, 1)
    dil = _spatial_ints(attrs, "dilations", n, 1)
    extra = tuple(attrs.get("output_padding") or (0,) * n)
    if len(extra) != n or any(not 0 <= e < max(s, d) for e, s, d in
                              zip(extra, strides, dil, strict=True)):
        raise fail(f"output_padding {list(extra)} must have {n} entries, each below its stride "
                   "or dilation")
    given = attrs.get("output_shape")
    auto = attrs.get("auto_pad", "NOTSET")
    if given is not None:
        if len(given) < n:
            raise fail(f"output_shape {list(given)} must give the {n} spatial sizes")
        out = tuple(int(v) for v in given[-n:])
    elif auto in ("SAME_UPPER", "SAME_LOWER"):
        out = tuple(d * s for d, s in zip(x.shape[2:], strides, strict=True))
    else:
        if auto not in ("NOTSET", "VALID"):
            raise fail(f"auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, got "
                       f"{auto!r}")
        pads = tuple(attrs.get("pads") or (0,) * (2 * n)) if auto == "NOTSET" else (0,) * 2 * n
        if len(pads) != 2 * n:
            raise fail(f"pads {list(pads)} must have {2 * n} entries")
        out = tuple(s * (d - 1) + e + (k - 1) * dd + 1 - pads[i] - pads[n + i]
                    for i, (d, s, e, k, dd) in enumerate(
                        zip(x.shape[2:], strides, extra, kernel, dil, strict=True)))
    if any(o < 1 for o in out):
        raise fail(f"gives the empty or negative spatial sizes {out}")
    return (TensorType(dt, (x.shape[0], m) + out, x.device),)


@TYPE_RULES.register("GlobalAveragePool", "GlobalMaxPool")
def global_pool(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    x = tensor(args[0], "X")
    if x.rank < 3:
        raise fail(f"X must be (N, C, D1, ...), got {x.shape}")
    return (x.with_shape(x.shape[:2] + (1,) * (x.rank - 2)),)


# --- Normalization -----------------------------------------------------------------------------

@TYPE_RULES.register("BatchNormalization")
def batch_norm(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    """Inference: Y. Training (``training_mode=1``): Y, running_mean, running_var."""
    x = tensor(args[0], "X")
    if x.rank < 2:
        raise fail(f"X must be (N, C, ...), got {x.shape}")
    c = x.shape[1]
    names = ("scale", "B", "input_mean", "input_var")
    params = [tensor(a, n) for a, n in zip(args[1:], names, strict=True)]
    for t, name in zip(params, names, strict=True):
        if t.shape != (c,):
            raise fail(f"{name} must have shape {(c,)} (the channels of X {x.shape}), got "
                       f"{t.shape}")
    same_dtype(params[:2], op_type)
    same_dtype(params[2:], op_type)
    training = bool(attrs.get("training_mode", 0))
    if not training and n_out != 1:
        raise fail("has one result unless training_mode=1")
    if training and n_out != 3:
        raise fail(f"with training_mode=1 has 3 results (Y, running_mean, running_var), "
                   f"{n_out} named")
    return (x,) + ((params[2], params[3]) if training else ())


@TYPE_RULES.register("LayerNormalization")
def layer_norm(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    """Y like X; Mean and InvStdDev of shape ``X.shape[:axis] + (1,) * (rank - axis)`` in
    the ``stash_type`` dtype (Float32 by default)."""
    x = tensor(args[0], "X")
    axis = norm_axis(attrs.get("axis", -1), x.rank)
    norm_shape = x.shape[axis:]
    for a, name in zip(args[1:], ("Scale", "B"), strict=False):
        if a is None:
            continue
        t = tensor(a, name)
        if t.dtype != x.dtype:
            raise fail(f"{name} must be {x.dtype.value} like X, got {t.dtype.value}")
        try:
            ok = broadcast_shapes(t.shape, norm_shape) == norm_shape
        except TypeInferenceError:
            ok = False
        if not ok:
            raise fail(f"{name} of shape {t.shape} does not broadcast to {norm_shape}, the "
                       f"normalized axes of X {x.shape}")
    stash = STASH_TYPES.get(attrs.get("stash_type", 1))
    if stash is None:
        raise fail(f"stash_type {attrs.get('stash_type')} is not a float type code (1, 10, 11 "
                   "or 16)")
    stat = TensorType(stash, x.shape[:axis] + (1,) * (x.rank - axis), x.device)
    return ((x, stat, stat))[:n_out]


def _per_channel(op_type: str, args: tuple, what: str) -> TensorType:
    """X of an (N, C, D1, ...) normalization, after checking that its other inputs are
    C-vectors of X's dtype."""
    x = tensor(args[0], "X")
    if x.rank < 2:
        raise fail(f"X must be (N, C, ...), got {x.shape}")
    c = x.shape[1]
    for a, name in zip(args[1:], ("scale", "B"), strict=False):
        t = tensor(a, name)
        if t.dtype != x.dtype:
            raise fail(f"{name} must be {x.dtype.value} like X, got {t.dtype.value}")
        if t.shape != (c,):
            raise fail(f"{name} must have shape {(c,)} ({what} of X {x.shape}), got {t.shape}")
    return x


@TYPE_RULES.register("InstanceNormalization")
def instance_norm(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    return (_per_channel(op_type, args, "the channels"),)


@TYPE_RULES.register("MeanVarianceNormalization")
def mvn(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    x = tensor(args[0])
    norm_axes(list(attrs.get("axes") or ()), x.rank)
    return (x,)


@TYPE_RULES.register("GroupNormalization")
def group_norm(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    """Opset 21: scale and bias are per channel; ``num_groups`` must divide the channels."""
    x = _per_channel(op_type, args, "the channels")
    g = attrs.get("num_groups")
    if not isinstance(g, int) or g < 1 or x.shape[1] % g:
        raise fail(f"num_groups={g} must be a positive divisor of the {x.shape[1]} channels "
                   f"of X {x.shape}")
    if attrs.get("stash_type", 1) not in STASH_TYPES:
        raise fail(f"stash_type {attrs.get('stash_type')} is not a float type code (1, 10, 11 "
                   "or 16)")
    return (x,)


@TYPE_RULES.register("LRN")
def lrn(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    x = tensor(args[0], "X")
    if x.rank < 3:
        raise fail(f"X must be (N, C, D1, ...), got {x.shape}")
    if attrs.get("size", 0) < 1:
        raise fail(f"size must be positive, got {attrs.get('size')}")
    return (x,)


@TYPE_RULES.register("Softmax", "LogSoftmax", "Hardmax", "LpNormalization")
def softmax(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    x = tensor(args[0])
    norm_axis(attrs.get("axis", -1), x.rank)
    if not x.dtype.is_float:
        raise fail(f"needs a float tensor, got {x.dtype.value}")
    return (x,)


# --- Reductions --------------------------------------------------------------------------------

REDUCTIONS = ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
              "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp", "ReduceLogSum")


@TYPE_RULES.register(*REDUCTIONS)
def reduce(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    """Axes from the optional ``axes`` input; none (or empty) reduces every axis, unless
    ``noop_with_empty_axes`` makes it the identity."""
    x = tensor(args[0])
    axes_in = args[1] if len(args) > 1 else None
    given = [] if axes_in is None else const_ints(axes_in, "the axes input")
    if not given:
        if attrs.get("noop_with_empty_axes", 0):
            return (x,)
        axes = set(range(x.rank))
    else:
        axes = set(norm_axes(given, x.rank))
    if attrs.get("keepdims", 1):
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    else:
        shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    return (x.with_shape(shape),)
