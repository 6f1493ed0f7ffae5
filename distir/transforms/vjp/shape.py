"""VJP rules of shape, indexing and reduction ops.

Views go back by the inverse view (``Reshape`` to the input's static shape, the inverse
permutation). ``Slice`` pads its cotangent with zero blocks (``Concat``), spreading its rows
by a step first (each row followed by zero rows, viewed as one axis); a negative step
scatters it; ``Gather`` (an embedding lookup) scatter-adds its cotangent into
zeros with ``ScatterND(reduction="add")``, so repeated indices add up. Shape and index
inputs (axes, bounds, indices) must be known before the step, as type propagation already
requires of them, and never get a gradient.
"""

from __future__ import annotations

import math

import numpy as np

from distir.ir.core import Value
from distir.ir.types import DType
from distir.transforms.vjp import VJP_RULES, VJPContext


def _back_to_input(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    out: list[Value | None] = [cx.reshape(douts[0], cx.tx(0).shape)]
    return tuple(out + [None] * (len(need) - 1))


VJP_RULES.register("Reshape", "Flatten", "Squeeze", "Unsqueeze")(_back_to_input)


@VJP_RULES.register("Transpose")
def transpose(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    rank = cx.tx(0).rank
    perm = cx.attrs.get("perm")
    p = list(range(rank - 1, -1, -1)) if perm is None else [int(a) % rank for a in perm]
    inv = [0] * rank
    for i, a in enumerate(p):
        inv[a] = i
    return (cx.emit("Transpose", douts[0], perm=inv),)


@VJP_RULES.register("Expand")
def expand(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    return (cx.sum_to(douts[0], cx.ty().shape, cx.tx(0).shape), None)


@VJP_RULES.register("Concat")
def concat(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    rank = cx.ty().rank
    axis = int(cx.attrs["axis"]) % rank
    sizes = [cx.tx(i).shape[axis] for i in range(cx.n_in)]
    if len(sizes) == 1:
        return (douts[0],)
    parts = cx.emit("Split", douts[0], cx.ints(sizes), axis=axis, n=len(sizes))
    return tuple(p if n else None for p, n in zip(parts, need))


@VJP_RULES.register("Split")
def split(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    rank = cx.tx(0).rank
    axis = int(cx.attrs.get("axis", 0)) % rank
    parts = [d if d is not None else cx.zeros(cx.ty(j)) for j, d in enumerate(douts)]
    g = parts[0] if len(parts) == 1 else cx.emit("Concat", *parts, axis=axis)
    return (g,) + (None,) * (len(need) - 1)


def _slice_index(cx: VJPContext) -> tuple[slice, ...]:
    """The numpy index of a ``Slice`` with known bounds."""
    shape = cx.tx(0).shape
    starts = cx.known_ints(1, "starts")
    ends = cx.known_ints(2, "ends")
    axes = cx.known_ints(3, "axes") if cx.has(3) else list(range(len(starts)))
    steps = cx.known_ints(4, "steps") if cx.has(4) else [1] * len(starts)
    idx = [slice(None)] * len(shape)
    for s, e, a, st in zip(starts, ends, axes, steps):
        idx[a % len(shape)] = slice(s, e, st)
    return tuple(idx)


@VJP_RULES.register("Slice")
def slice_(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    shape = cx.tx(0).shape
    t = cx.ty()
    idx = _slice_index(cx)
    rest = (None,) * (len(need) - 1)
    bounds = [s.indices(n) for s, n in zip(idx, shape)]
    if any(st < 0 for _, _, st in bounds):
        # Negative steps: scatter into the flattened input by the known positions.
        n = int(np.prod(shape))
        pos = np.arange(n, dtype=np.int64).reshape(shape)[idx].reshape(-1, 1)
        flat = cx.emit("ScatterND", cx.zeros(t.with_shape((n,))), cx.const(pos),
                       cx.reshape(douts[0], (pos.shape[0],)))
        return (cx.reshape(flat, shape),) + rest
    # Axis by axis, each a view or a concatenation with zero blocks (no op mixes axes, so
    # a split of any other axis, the batch's, passes through): a step s spreads the
    # cotangent's rows s apart (each row followed by s - 1 zero rows, the whole viewed
    # back as one axis), then zero rows before the start and after the end.
    g = douts[0]
    cur = list(t.shape)

    def zeros(ax: int, n: int, dims: list[int]) -> Value:
        return cx.zeros(t.with_shape(tuple(dims[:ax] + [n] + dims[ax + 1:])))

    for ax, (lo, _, st) in enumerate(bounds):
        count = cur[ax]
        if st == 1 and lo == 0 and count == shape[ax]:
            continue
        if st > 1 and count:
            wide = cur[:ax + 1] + [1] + cur[ax + 1:]
            g = cx.emit("Concat", cx.reshape(g, tuple(wide)), zeros(ax + 1, st - 1, wide),
                        axis=ax + 1)
            cur[ax] = count * st
            g = cx.reshape(g, tuple(cur))
        end = lo + cur[ax]
        if end > shape[ax]:  # the last row's trailing zeros run past the end
            g = cx.emit("Slice", g, cx.ints([0]), cx.ints([shape[ax] - lo]), cx.ints([ax]))
            cur[ax] = shape[ax] - lo
            end = shape[ax]
        pieces = [zeros(ax, lo, cur)] if lo > 0 else []
        pieces.append(g)
        if shape[ax] > end:
            pieces.append(zeros(ax, shape[ax] - end, cur))
        cur[ax] = shape[ax]
        g = pieces[0] if len(pieces) == 1 else cx.emit("Concat", *pieces, axis=ax)
    return (g,) + rest


@VJP_RULES.register("Gather")
def gather(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    """Scatter-add of the cotangent into zeros of the data's shape, along ``axis`` (moved
    to the front and back with ``Transpose`` when it is not 0). Known negative indices
    are wrapped; indices computed in the step are taken to be non-negative."""
    data, it = cx.tx(0), cx.tx(1)
    rank, axis = data.rank, int(cx.attrs.get("axis", 0)) % data.rank
    d = douts[0]
    known = cx.known(1)
    idx = cx.x(1)
    if known is not None and (known < 0).any():
        idx = cx.const(np.where(known < 0, known + data.shape[axis], known).astype(np.int64))
    elif it.dtype is not DType.Int64:
        idx = cx.emit("Cast", idx, to=DType.Int64)
    idx = cx.emit("Unsqueeze", idx, cx.ints([it.rank]))
    k = it.rank
    if axis != 0:
        # d has axes data[:axis] + I + data[axis+1:]: bring the I axes to the front.
        perm = list(range(axis, axis + k)) + list(range(axis)) + list(
            range(axis + k, rank - 1 + k))
        d = cx.emit("Transpose", d, perm=perm)
    moved = (data.shape[axis],) + data.shape[:axis] + data.shape[axis + 1:]
    g = cx.emit("ScatterND", cx.zeros(data.with_shape(moved)), idx, d, reduction="add")
    if axis != 0:
        back = list(range(1, axis + 1)) + [0] + list(range(axis + 1, rank))
        g = cx.emit("Transpose", g, perm=back)
    return (g, None)


def _reduce_axes(cx: VJPContext) -> list[int] | None:
    """The reduced axes (``None``: the op is the identity), normalized."""
    rank = cx.tx(0).rank
    axes = cx.known_ints(1, "axes") if cx.has(1) else []
    if not axes:
        return None if cx.attrs.get("noop_with_empty_axes", 0) else list(range(rank))
    return sorted(a % rank for a in axes)


def _spread(cx: VJPContext, d: Value, axes: list[int]) -> Value:
    """A reduction's cotangent broadcast back over the reduced axes."""
    x = cx.tx(0)
    if not cx.attrs.get("keepdims", 1):
        d = cx.reshape(d, tuple(1 if i in axes else s for i, s in enumerate(x.shape)))
    return cx.emit("Expand", d, cx.ints(x.shape))


@VJP_RULES.register("ReduceSum", "ReduceMean")
def reduce_sum(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    axes = _reduce_axes(cx)
    rest = (None,) * (len(need) - 1)
    if axes is None:
        return (douts[0],) + rest
    x = cx.tx(0)
    d = douts[0]
    if cx.op.op_type == "ReduceMean":
        count = int(np.prod([x.shape[a] for a in axes]))
        d = cx.mul(d, cx.scalar(1.0 / max(count, 1), x))
    return (_spread(cx, d, axes),) + rest


@VJP_RULES.register("ReduceMax", "ReduceMin")
def reduce_max(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    """The cotangent goes to every element equal to its maximum (minimum)."""
    axes = _reduce_axes(cx)
    rest = (None,) * (len(need) - 1)
    if axes is None:
        return (douts[0],) + rest
    x = cx.tx(0)
    y = _spread(cx, cx.y(), axes)
    hit = cx.emit("Equal", cx.x(0), y)
    g = cx.emit("Where", hit, _spread(cx, douts[0], axes), cx.scalar(0.0, x))
    return (g,) + rest


@VJP_RULES.register("ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSumExp",
                    "ReduceProd", "ReduceLogSum")
def reduce_smooth(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    """The spread cotangent times the derivative of the reduction with respect to each
    element: ``2x``, ``sign(x)``, ``x / y``, ``exp(x - y)``, ``y / x`` (undefined where an
    element is 0), ``exp(-y)``."""
    axes = _reduce_axes(cx)
    rest = (None,) * (len(need) - 1)
    if axes is None:
        return (douts[0],) + rest
    x, t, op = cx.x(0), cx.tx(0), cx.op.op_type
    d = _spread(cx, douts[0], axes)
    if op == "ReduceSumSquare":
        slope = cx.mul(x, cx.scalar(2.0, t))
    elif op == "ReduceL1":
        slope = cx.emit("Sign", x)
    else:
        y = _spread(cx, cx.y(), axes)
        if op == "ReduceL2":
            slope = cx.emit("Div", x, y)
        elif op == "ReduceLogSumExp":
            slope = cx.emit("Exp", cx.emit("Sub", x, y))
        elif op == "ReduceLogSum":
            slope = cx.emit("Exp", cx.emit("Neg", y))
        else:
            slope = cx.emit("Div", y, x)
    return (cx.mul(d, slope),) + rest


@VJP_RULES.register("Pad")
def pad(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    """Constant padding: the part of the cotangent that lies over the input (``Slice``).
    With negative pads (a crop, RWKV's token shift ``ZeroPad2d((0, 0, 1, -1))``): the
    cotangent padded by the negated pads, zeros where the crop took the input away."""
    if cx.attrs.get("mode", "constant") != "constant":
        raise cx.fail(f"Pad with mode={cx.attrs['mode']!r} (only \"constant\")")
    shape = cx.tx(0).shape
    rank = len(shape)
    pads = cx.known_ints(1, "pads")
    axes = [a % rank for a in cx.known_ints(3, "axes")] if cx.has(3) else list(range(rank))
    if any(p < 0 for p in pads):
        g = cx.emit("Pad", douts[0], cx.ints([-p for p in pads]), None, cx.ints(axes))
        return (g,) + (None,) * (len(need) - 1)
    starts = pads[:len(axes)]
    ends = [b + shape[a] for b, a in zip(starts, axes)]
    g = cx.emit("Slice", douts[0], cx.ints(starts), cx.ints(ends), cx.ints(axes))
    return (g,) + (None,) * (len(need) - 1)


@VJP_RULES.register("Tile")
def tile(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    """The cotangent seen as ``(r0, s0, r1, s1, ...)`` summed over the repeat axes."""
    shape = cx.tx(0).shape
    reps = cx.known_ints(1, "repeats")
    split: list[int] = []
    for r, n in zip(reps, shape):
        split += [r, n]
    g = cx.reshape(douts[0], tuple(split))
    g = cx.reduce_sum(g, list(range(0, 2 * len(shape), 2)), keepdims=False)
    return (g, None)


@VJP_RULES.register("Trilu")
def trilu(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    ins = [douts[0]] + ([cx.x(1)] if cx.has(1) else [])
    return (cx.emit("Trilu", *ins, upper=int(cx.attrs["upper"])),) + (None,) * (len(need) - 1)


def _view_back(cx: VJPContext, d: Value, mid: tuple[int, ...], perm: list[int]) -> Value:
    """The cotangent of ``Reshape(Transpose(Reshape(x, mid), perm), y.shape)``."""
    inv = [0] * len(perm)
    for i, a in enumerate(perm):
        inv[a] = i
    moved = tuple(mid[a] for a in perm)
    g = cx.emit("Transpose", cx.reshape(d, moved), perm=inv)
    return cx.reshape(g, cx.tx(0).shape)


@VJP_RULES.register("DepthToSpace", "SpaceToDepth")
def depth_to_space(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    """Both are a reshape, a transpose and a reshape (ONNX's definitions): undone in
    reverse order."""
    n, c, h, w = cx.tx(0).shape
    b = int(cx.attrs["blocksize"])
    if cx.op.op_type == "SpaceToDepth":
        return (_view_back(cx, douts[0], (n, c, h // b, b, w // b, b), [0, 3, 5, 1, 2, 4]),)
    if cx.attrs.get("mode", "DCR") == "DCR":
        return (_view_back(cx, douts[0], (n, b, b, c // (b * b), h, w), [0, 3, 4, 1, 5, 2]),)
    return (_view_back(cx, douts[0], (n, c // (b * b), b, b, h, w), [0, 1, 4, 2, 5, 3]),)


@VJP_RULES.register("Col2Im")
def col2im(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    """Folding's adjoint is unfolding (im2col) the image's cotangent. Where the blocks tile
    the image (strides equal to the block, no dilation, no pads: MobileViTV2's patches) it
    is a reshape, a transpose and a reshape; else a depthwise convolution whose kernels
    are one-hot, one output channel per block position, in ``Col2Im``'s row order."""
    from distir.analysis.type_rules.spatial import col2im_geometry

    image = cx.known_ints(1, "image_shape")
    block = cx.known_ints(2, "block_shape")
    dil, pads, strides, counts = col2im_geometry(cx.attrs, image, block)
    x = cx.tx(0)
    n, rows = x.shape[0], x.shape[1]
    per = math.prod(block)
    c = rows // per
    k = len(image)
    d = douts[0]
    if set(dil) == {1} and not any(pads) and strides == block and \
            all(p * b == i for p, b, i in zip(counts, block, image, strict=True)):
        mid = (n, c, *(v for pb in zip(counts, block, strict=True) for v in pb))
        perm = [0, 1, *(3 + 2 * i for i in range(k)), *(2 + 2 * i for i in range(k))]
        g = cx.emit("Transpose", cx.reshape(d, mid), perm=perm)
        return (cx.reshape(g, tuple(x.shape)), None, None)
    w = np.zeros((c * per, 1, *block), dtype=np.float32)
    for ch in range(c):
        for j, at in enumerate(np.ndindex(*block)):
            w[(ch * per + j, 0, *at)] = 1.0
    g = cx.emit("Conv", d, cx.const(w, x.dtype), group=c, kernel_shape=list(block),
                strides=list(strides), dilations=list(dil), pads=list(pads))
    return (cx.reshape(g, tuple(x.shape)), None, None)


@VJP_RULES.register("GatherElements")
def gather_elements(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    """Scatter-add into zeros (``ScatterElements(reduction="add")``)."""
    g = cx.emit("ScatterElements", cx.zeros(cx.tx(0)), cx.x(1), douts[0],
                axis=int(cx.attrs["axis"]), reduction="add")
    return (g, None)


@VJP_RULES.register("GatherND")
def gather_nd(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    if int(cx.attrs.get("batch_dims", 0)):
        raise cx.fail("GatherND with batch_dims > 0")
    g = cx.emit("ScatterND", cx.zeros(cx.tx(0)), cx.x(1), douts[0], reduction="add")
    return (g, None)


@VJP_RULES.register("ScatterND", "ScatterElements")
def scatter(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    """``reduction="none"``: the data's cotangent is zero where updates were written, the
    updates' is the cotangent gathered there; ``"add"``: the data's passes unchanged."""
    d = douts[0]
    red = cx.attrs.get("reduction", "none")
    if red not in ("none", "add"):
        raise cx.fail(f"{cx.op.op_type} with reduction={red!r}")
    nd = cx.op.op_type == "ScatterND"
    extra = {} if nd else {"axis": int(cx.attrs["axis"])}
    gd = gu = None
    if need[0]:
        gd = d if red == "add" else cx.emit(cx.op.op_type, d, cx.x(1), cx.zeros(cx.tx(2)),
                                             **extra)
    if need[2]:
        gu = cx.emit("GatherND" if nd else "GatherElements", d, cx.x(1), **extra)
    return (gd, None, gu)


@VJP_RULES.register("TopK")
def top_k(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    """The values' cotangent scattered to where they were taken from."""
    if douts[0] is None:
        return (None, None)
    g = cx.emit("ScatterElements", cx.zeros(cx.tx(0)), cx.y(1), douts[0],
                axis=int(cx.attrs["axis"]), reduction="add")
    return (g, None)


@VJP_RULES.register("CumSum")
def cum_sum(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    """The cumulative sum in the other direction (same ``exclusive``)."""
    g = cx.emit("CumSum", douts[0], cx.x(1), exclusive=int(cx.attrs["exclusive"]),
                reverse=1 - int(cx.attrs["reverse"]))
    return (g, None)


@VJP_RULES.register("Resize")
def resize(cx: VJPContext, douts: tuple, need: tuple) -> tuple:
    """``Resize`` is linear in ``X`` and separable: along each resized axis ``a`` (``n``
    elements to ``m``) it multiplies by an ``n x m`` interpolation matrix ``R_a`` (how much
    each input element adds to each output one: nearest, linear or cubic taps, antialiased
    or not), so the cotangent goes back by ``R_a``'s transpose, axis by axis (``MatMul``
    with a constant). ``R_a`` is the resize of an identity matrix along one axis with the
    op's own attributes and the axis's scale, computed by the reference kernel when the step
    is built: a ViT's position embeddings interpolated to another image size get their
    gradient so. ``tf_crop_and_resize`` (an affine map, not linear) and sizes kept to an
    aspect ratio are refused."""
    from distir.analysis.numpy_rules.onnx_ops import onnx_op
    from distir.analysis.type_rules.spatial import resize_shape

    out: list[Value | None] = [None] * len(need)
    if not need[0]:
        return tuple(out)
    attrs = dict(cx.attrs)
    if attrs.get("coordinate_transformation_mode") == "tf_crop_and_resize":
        raise cx.fail("coordinate_transformation_mode=tf_crop_and_resize is not linear in X")
    x, y = cx.tx(0), cx.ty(0)
    # (exporters write an empty tensor for the omitted one of scales and sizes)
    given = [cx.has(i) and cx.tx(i).numel > 0 for i in range(cx.n_in)] + [False] * 4
    known = [cx.known(i) if given[i] else None for i in range(cx.n_in)] + [None] * 4
    if given[2] and known[2] is None or given[3] and known[3] is None:
        raise cx.fail("its scales or sizes must be known before the step")
    if given[3] and attrs.get("keep_aspect_ratio_policy", "stretch") != "stretch":
        raise cx.fail("sizes kept to an aspect ratio (keep_aspect_ratio_policy)")
    args = tuple(cx.env.get(v) if v is not None and given[i] else None
                 for i, v in enumerate(cx.op.inputs))
    _, scales = resize_shape(x.shape, args, attrs)
    one = {k: v for k, v in attrs.items() if k != "axes"}
    g = douts[0]
    rank = x.rank
    for a in range(rank):
        n, m = x.shape[a], y.shape[a]
        if n == m and scales[a] == 1.0:
            continue
        eye = np.eye(n, dtype=np.float64)
        one_axis: tuple
        if given[3]:  # sizes: the same (stretched) ratio m / n along this axis
            one_axis = (eye, None, None, np.asarray([n, m], np.int64))
        else:
            one_axis = (eye, None, np.asarray([1.0, scales[a]], np.float32), None)
        (r,) = onnx_op("Resize", one_axis, one, 1)
        r = np.asarray(r)
        if r.shape != (n, m):
            raise cx.fail(f"axis {a}: the interpolation matrix has shape {r.shape}, not "
                          f"{(n, m)}")
        perm = [i for i in range(rank) if i != a] + [a]
        inv = list(np.argsort(perm))
        moved = cx.emit("Transpose", g, perm=perm) if a != rank - 1 else g
        back = cx.emit("MatMul", moved, cx.const(r.T, y.dtype.np))
        g = cx.emit("Transpose", back, perm=[int(i) for i in inv]) if a != rank - 1 else back
    out[0] = g
    return tuple(out)
