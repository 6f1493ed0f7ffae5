"""Layout rules of convolution, pooling, normalization and general matrix ops, and of their
gradient ops (see ``layout_rules`` for the rule signature).

These ops run per sample, so a split batch axis (axis 0) passes through them unchanged;
their channel and spatial axes mix neighbouring elements (a window, a normalization over
channels), so a split there is refused, as is a split weight (tensor parallelism of
convolutions is not done here). Gradient ops give the weight gradients as partial sums over
the marks of the batch axis (each shard's summand of the gradient).

``BatchNormalization`` in training mode normalizes each shard by its own statistics, as
PyTorch's ``DistributedDataParallel`` does (per-replica statistics); its running-statistics
results are partial over the batch and averaged over the shards (``mean_scaled``).
"""

from __future__ import annotations

from collections.abc import Callable

from distir.transforms.layout import Demand, Layout, Reject, T, replicated
from distir.transforms.layout_rules import (
    RuleResult,
    broadcast_marks,
    matmul_layout,
    register,
)

__all__ = ["sample_axes_only"]


def sample_axes_only(op_type: str, lay: Layout, keep: int = 1, what: str = "") -> None:
    """Reject unless only the first ``keep`` axes of ``lay`` are split."""
    for a, m in enumerate(lay.marks):
        if m is not None and a >= keep:
            kind = "channel" if a == 1 else "spatial" if keep <= 1 or a >= 2 else "axis"
            raise Reject(f"{op_type} over a split {kind} axis ({a}){what}")


def _whole(op_type: str, ins: tuple, first: int, what: str) -> None:
    for lay in ins[first:]:
        if lay is not None and any(lay.marks):
            raise Reject(f"{op_type} with a split {what}")


def _partial(lay: Layout) -> str:
    """The marks over which a value summed over every axis of ``lay`` is partial."""
    return "".join(sorted(m for m in lay.marks if m))


# -- convolution ---------------------------------------------------------------------------
@register("Conv", "ConvTranspose")
def conv(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
         const: Callable) -> RuleResult:
    x = ins[0]
    w = ins[1]
    b = ins[2] if len(ins) > 2 else None
    if op_type == "Conv" and (x.marks[1:2] == (T,) or w.marks[0] == T):
        return _conv_channels(x, w, b, outs, attrs)
    sample_axes_only(op_type, x)
    _whole(op_type, ins, 1, "weight or bias")
    return ((Layout(x.marks[:1] + (None,) * (len(outs[0]) - 1)), ""),)


def _conv_channels(x: Layout, w: Layout, b: Layout | None, outs: tuple,
                   attrs: dict) -> RuleResult:
    """A convolution with channels split over the tensor-parallel ranks: output channels
    (weight axis 0, and its bias) give a channel-split result; input channels (weight axis
    1) a partial sum, whose whole bias rank 0 adds (``emit.Emitter``); a depthwise
    convolution (a group per channel) keeps the split, its weight split alike."""
    group = int(attrs.get("group", 1) or 1)
    for a, m in enumerate(x.marks):
        if m is not None and a > 1:
            raise Reject("Conv over a split spatial axis")
    rank = len(outs[0])
    if group != 1:  # depthwise (one input channel per group): the split passes through
        if x.marks[1] != T or group != outs[0][1] or w.groups != 1 and w.groups != x.groups:
            raise Reject("a grouped Conv with a split channel axis")
        want = Layout((T,) + (None,) * (len(w.marks) - 1), x.groups)
        if w != want:
            if any(w.marks):
                raise Reject("a depthwise Conv's weight is split unlike its channels")
            raise Demand(1, want)
        if b is not None and b != Layout((T,), x.groups):
            if any(b.marks):
                raise Reject("Conv's bias is split unlike its output channels")
            raise Demand(2, Layout((T,), x.groups))
        return ((Layout(x.marks[:1] + (T,) + (None,) * (rank - 2), x.groups), ""),)
    if x.marks[1] == T:
        want = Layout((None, T) + (None,) * (len(w.marks) - 2), x.groups)
        if w != want:
            if any(w.marks):
                raise Reject("Conv's weight is split unlike its input channels")
            raise Demand(1, want)
        if b is not None and any(b.marks):
            raise Reject("Conv with split input channels and a split bias")
        return ((Layout(x.marks[:1] + (None,) * (rank - 1)), T),)
    if any(w.marks[1:]):
        raise Reject("Conv's weight is split along a kernel axis")
    if b is not None and b != Layout((T,), w.groups):
        if any(b.marks):
            raise Reject("Conv's bias is split unlike its output channels")
        raise Demand(2, Layout((T,), w.groups))
    return ((Layout(x.marks[:1] + (T,) + (None,) * (rank - 2), w.groups), ""),)


@register("ConvGrad")
def conv_grad(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
              const: Callable) -> RuleResult:
    x, w, dy = ins
    if x.marks[1:2] == (T,) or T in w.marks:
        return _conv_grad_channels(x, w, dy, outs, attrs)
    sample_axes_only(op_type, x)
    _whole(op_type, (w,), 0, "weight")
    want = Layout(x.marks[:1] + (None,) * (len(dy.marks) - 1))
    if dy != want:
        raise Demand(2, want) if not any(dy.marks) else Reject(
            f"dy is split as {dy}, unlike Conv(x, w) which is {want}")
    return ((x, ""), (replicated(len(outs[1])), _partial(x)))


def _conv_grad_channels(x: Layout, w: Layout, dy: Layout, outs: tuple,
                        attrs: dict) -> RuleResult:
    """The gradient of a channel-split ``Conv`` (``_conv_channels``): split input channels
    give a split ``dx``; split output channels a ``dx`` partial over the ranks. ``dw`` is
    split like ``w`` and partial over the batch."""
    group = int(attrs.get("group", 1) or 1)
    if any(m is not None for m in x.marks[2:]):
        raise Reject("ConvGrad over a split spatial axis")
    rank = len(dy.marks)
    batch = Layout(x.marks[:1])
    if group != 1:  # depthwise: every axis keeps its split, nothing is summed over ranks
        if x.marks[1] != T or group != outs[0][1] or \
                w != Layout((T,) + (None,) * (len(w.marks) - 1), x.groups):
            raise Reject("a grouped ConvGrad with a split channel axis")
        want = Layout(x.marks[:1] + (T,) + (None,) * (rank - 2), x.groups)
        dx_partial = ""
    elif x.marks[1] == T:
        if w != Layout((None, T) + (None,) * (len(w.marks) - 2), x.groups):
            raise Reject("ConvGrad's weight is split unlike its input channels")
        want = Layout(x.marks[:1] + (None,) * (rank - 1))
        dx_partial = ""
    elif w.marks[0] == T and not any(w.marks[1:]):
        want = Layout(x.marks[:1] + (T,) + (None,) * (rank - 2), w.groups)
        dx_partial = T
    else:
        raise Reject("ConvGrad's weight is split along a kernel axis")
    if dy != want:
        raise Demand(2, want) if not any(dy.marks) else Reject(
            f"dy is split as {dy}, unlike Conv(x, w) which is {want}")
    return ((x, dx_partial), (w, _partial(batch)))


# -- pooling ---------------------------------------------------------------------------------
@register("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool")
def pool(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
         const: Callable) -> RuleResult:
    x = ins[0]
    sample_axes_only(op_type, x, keep=2)
    if len(outs) > 1 and any(x.marks):  # flat indices count the elements of other shards
        raise Reject(f"{op_type}'s indices of a split tensor")
    return ((Layout(x.marks[:2] + (None,) * (len(outs[0]) - 2)), ""),)


@register("MaxPoolGrad", "AveragePoolGrad")
def pool_grad(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
              const: Callable) -> RuleResult:
    x, dy = ins
    sample_axes_only(op_type, x, keep=2)
    want = Layout(x.marks[:2] + (None,) * (len(dy.marks) - 2))
    if dy != want:
        raise Demand(1, want) if not any(dy.marks) else Reject(
            f"dy is split as {dy}, unlike the pooled x which is {want}")
    return ((x, ""),)


# -- normalization ---------------------------------------------------------------------------
@register("BatchNormalization")
def batch_norm(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
               const: Callable) -> RuleResult:
    x = ins[0]
    if x.marks[1:2] == (T,):  # channels over the ranks: each rank its channels' parameters
        sample_axes_only(op_type, Layout(x.marks[:1] + (None,) + x.marks[2:]),
                         what=": the statistics are per channel")
        want = Layout((T,), x.groups)
        for k in range(1, len(ins)):
            if ins[k] is not None and ins[k] != want:
                if any(ins[k].marks):
                    raise Reject("BatchNormalization's parameters split unlike its channels")
                raise Demand(k, want)
        res_t: list[tuple[Layout, str]] = [(x, "")]
        res_t.extend((want, _partial(Layout(x.marks[:1]))) for _ in outs[1:])
        return tuple(res_t)
    sample_axes_only(op_type, x, what=": the statistics are per channel")
    _whole(op_type, ins, 1, "scale, bias or statistics")
    res: list[tuple[Layout, str]] = [(x, "")]
    # Running statistics (training mode): each shard's, averaged over the shards.
    res.extend((replicated(len(s)), _partial(x)) for s in outs[1:])
    return tuple(res)


@register("InstanceNormalization", "GroupNormalization", "LRN",
          "MeanVarianceNormalization")
def per_sample_norm(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
                    const: Callable) -> RuleResult:
    x = ins[0]
    if op_type == "MeanVarianceNormalization":
        axes = attrs.get("axes") or [0, 2, 3]
        if any(x.marks[a] for a in axes if a < len(x.marks)):
            raise Reject(f"{op_type} over a split axis")
        _whole(op_type, ins, 1, "scale or bias")
        return ((x, ""),)
    sample_axes_only(op_type, x)
    _whole(op_type, ins, 1, "scale or bias")
    return ((x, ""),)


@register("LayerNormGrad")
def layer_norm_grad(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
                    const: Callable) -> RuleResult:
    x, scale, dy = ins
    rank = len(x.marks)
    axis = attrs.get("axis", -1)
    axis = axis + rank if axis < 0 else axis
    if any(x.marks[axis:]):
        raise Reject(f"{op_type} over a split axis")
    _whole(op_type, (scale,), 0, "scale")
    if dy != x:
        raise Demand(2, x) if not any(dy.marks) else Reject(
            f"dy is split as {dy}, unlike x which is {x}")
    p = _partial(x)
    return ((x, ""),) + tuple((replicated(len(s)), p) for s in outs[1:])


@register("SoftmaxGrad", "LogSoftmaxGrad")
def softmax_grad(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
                 const: Callable) -> RuleResult:
    y, dy = ins
    rank = len(y.marks)
    axis = attrs.get("axis", -1)
    axis = axis + rank if axis < 0 else axis
    lay = broadcast_marks(ins, shapes, rank)
    if lay.marks[axis] is not None:
        raise Reject(f"{op_type} along a split axis")
    return ((lay, ""),)


# -- general matrix product ------------------------------------------------------------------
def _t(lay: Layout, trans: int) -> Layout:
    return Layout(lay.marks[::-1], lay.groups) if trans else lay


def _gemm(ins: tuple, shapes: tuple, attrs: dict) -> tuple[Layout, str, Layout, Layout]:
    """The layout of ``op(A) @ op(B)`` and its partial mark, with ``op(A)``'s and
    ``op(B)``'s layouts."""
    ta, tb = int(attrs.get("transA", 0)), int(attrs.get("transB", 0))
    la, lb = _t(ins[0], ta), _t(ins[1], tb)
    sa = shapes[0][::-1] if ta else shapes[0]
    sb = shapes[1][::-1] if tb else shapes[1]
    try:
        lay, partial, _, _ = matmul_layout(la, lb, sa, sb)
    except Demand as d:
        raise Demand(d.index, _t(d.layout, ta if d.index == 0 else tb)) from None
    return lay, partial, la, lb


@register("Gemm")
def gemm(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
         const: Callable) -> RuleResult:
    lay, partial, _, _ = _gemm(ins, shapes, attrs)
    if len(ins) > 2 and ins[2] is not None:
        if partial == T and not any(ins[2].marks):  # rank 0 adds the bias (emit.Emitter)
            return ((lay, partial),)
        if partial:
            raise Reject("Gemm with a split contraction axis adds its bias on every shard")
        try:
            lay = broadcast_marks((lay, ins[2]), (outs[0], shapes[2]), 2)
        except Demand as d:
            if d.index == 0:
                raise Reject("Gemm's bias is split unlike its product") from None
            raise Demand(2, d.layout) from None
    return ((lay, partial),)


@register("GemmGrad")
def gemm_grad(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
              const: Callable) -> RuleResult:
    has_c = len(ins) == 4
    dy = ins[-1]
    ly, _, la, lb = _gemm(ins[:2], shapes[:2], attrs)
    if dy != ly:
        raise Reject(f"dy is split as {dy}, unlike Gemm(a, b) which is {ly}")
    da = lb.marks[1] or ""  # da = dy @ op(B)^T contracts op(B)'s free axis
    db = la.marks[0] or ""  # db = op(A)^T @ dy contracts op(A)'s free axis
    res = [(ins[0], da), (ins[1], db)]
    if has_c and ins[2] is not None and any(ly.marks):
        try:  # C is split like the product's columns, as the forward Gemm asked
            broadcast_marks((ly, ins[2]), (shapes[-1], shapes[2]), len(shapes[-1]))
        except Demand as d:
            if d.index == 0:
                raise Reject("GemmGrad's C is split unlike the product") from None
            raise Demand(2, d.layout) from None
    if has_c and len(outs) > 2:
        sc = shapes[2]
        off = 2 - len(sc)
        dc = "".join(sorted(m for k, m in enumerate(ly.marks)
                            if m and (k < off or sc[k - off] == 1)))
        res.append((ins[2], dc))
    return tuple(res)


@register("BatchNormGrad")
def batch_norm_grad(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
                    const: Callable) -> RuleResult:
    """The gradient of a training-mode ``BatchNormalization`` with each shard's statistics
    (as its forward under D): ``dx`` per shard, ``dscale`` and ``dbias`` partial."""
    x, scale, dy = ins
    sample_axes_only(op_type, x, what=": the statistics are per channel")
    _whole(op_type, (scale,), 0, "scale")
    if dy != x:
        raise Demand(2, x) if not any(dy.marks) else Reject(
            f"dy is split as {dy}, unlike x which is {x}")
    p = _partial(x)
    return ((x, ""),) + tuple((replicated(len(s)), p) for s in outs[1:])


@register("GridSample")
def grid_sample(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
                const: Callable) -> RuleResult:
    """Per sample: the batch axis of the image and of the grid split alike."""
    x, grid = ins
    sample_axes_only(op_type, x)
    sample_axes_only(op_type, grid, what=" of the grid")
    if x.marks[0] != grid.marks[0]:
        if not any(grid.marks):
            raise Demand(1, Layout(x.marks[:1] + (None,) * (len(grid.marks) - 1)))
        if not any(x.marks):
            raise Demand(0, Layout(grid.marks[:1] + (None,) * (len(x.marks) - 1)))
        raise Reject(f"{op_type}: the image and the grid split the batch differently")
    return ((Layout(x.marks[:1] + (None,) * (len(outs[0]) - 1)), ""),)


@register("LSTM", "GRU")
def recurrent(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
              const: Callable) -> RuleResult:
    """Per sequence: the batch axis of ``X`` (axis 1, or 0 with ``layout=1``) passes to
    the batch axes of ``Y``, ``Y_h`` and ``Y_c``; ``sequence_lens`` and the initial states
    split alike; the weights stay whole; the time axis is never split."""
    lay1 = int(attrs.get("layout", 0)) == 1
    bx = 0 if lay1 else 1
    x = ins[0]
    for a, m in enumerate(x.marks):
        if m is not None and a != bx:
            raise Reject(f"{op_type} over a split {'time' if a == 1 - bx else 'feature'} "
                         f"axis ({a})")
    m = x.marks[bx]
    _whole(op_type, tuple(ins[k] for k in (1, 2, 3, 7) if k < len(ins)), 0,
           "weight or bias")
    # sequence_lens (batch,), initial_h / initial_c (dirs, batch, hidden) or (batch, ...).
    for k, axis in ((4, 0), (5, bx), (6, bx)):
        if k >= len(ins) or ins[k] is None:
            continue
        lay = ins[k]
        want = tuple(m if a == axis else None for a in range(len(lay.marks)))
        if lay.marks != want:
            if any(lay.marks):
                raise Reject(f"{op_type}: input {k} is split unlike the batch of X")
            raise Demand(k, Layout(want))
    res = []
    for k, s in enumerate(outs):
        axis = (0 if lay1 else 2) if k == 0 else bx
        res.append((Layout(tuple(m if a == axis else None for a in range(len(s)))), ""))
    return tuple(res)
