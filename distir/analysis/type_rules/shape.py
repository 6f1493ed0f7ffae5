"""Type rules of shape ops: Shape, Constant, Reshape, Gather, Slice, Concat, Split, ...

Semantics are ONNX opset 21's. Every result lives on the device of the inputs (``Constant``:
on its ``device`` attribute). Inputs that fix a result shape (Reshape's shape, Slice's
starts, axes inputs, ...) must be known: the interpreter passes them as ``Concrete`` when
they are constants or come from ``Shape``; ``const_ints`` raises the clear error otherwise.

``Shape`` and ``Constant`` also have mixed rules, so their results are concrete even from
abstract inputs: that is what lets a shape computed at run time (``Reshape(x,
Concat(-1, Gather(Shape(x), 2)))``) be typed exactly.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from distir.analysis.rules import MIXED_RULES, TYPE_RULES
from distir.analysis.type_rules._util import (
    broadcast_shapes,
    const_array,
    const_ints,
    fail,
    int_tensor,
    norm_axes,
    norm_axis,
    prod,
    same_dtype,
    tensor,
)
from distir.analysis.values import CONCRETE_LIMIT, Concrete
from distir.errors import TypeInferenceError
from distir.ir.types import DenseAttr, DType, TensorType

_I64 = DType.Int64


# --- Shape and constants ---------------------------------------------------------------------

def _shape_range(attrs: dict[str, Any], rank: int) -> tuple[int, int]:
    """Shape's ``[start, end)``: negative counts from the end, both clamped to ``[0, rank]``."""
    start = attrs.get("start", 0)
    end = attrs.get("end")
    end = rank if end is None else end
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return start, max(start, end)


@TYPE_RULES.register("Shape")
def shape_type(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    t = tensor(args[0])
    s, e = _shape_range(attrs, t.rank)
    return (TensorType(_I64, (e - s,), t.device),)


@MIXED_RULES.register("Shape")
def shape_mixed(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    t = tensor(args[0])
    s, e = _shape_range(attrs, t.rank)
    value = np.array(t.shape[s:e], dtype=np.int64)
    return (Concrete(TensorType(_I64, (e - s,), t.device), value),)


_CONSTANT_ATTRS = ("value", "value_float", "value_floats", "value_int", "value_ints",
                   "value_string", "value_strings", "sparse_value")


def _constant_array(attrs: dict[str, Any]) -> np.ndarray:
    given = [k for k in _CONSTANT_ATTRS if attrs.get(k) is not None]
    if len(given) != 1:
        raise fail("needs exactly one value attribute (value=dense<...>[...], value_int=, "
                   f"value_ints=, value_float=, value_floats=), got {given or 'none'}")
    k = given[0]
    v = attrs[k]
    if k == "value":
        if not isinstance(v, DenseAttr):
            raise fail(f"attribute value must be a dense tensor literal, got {v!r}")
        return v.array
    if k == "value_float":
        return np.array(v, dtype=np.float32)
    if k == "value_floats":
        return np.array(v, dtype=np.float32).reshape(len(v))
    if k == "value_int":
        return np.array(v, dtype=np.int64)
    if k == "value_ints":
        return np.array(v, dtype=np.int64).reshape(len(v))
    raise fail(f"attribute {k} is not supported: DistIR has no string or sparse tensors")


def _constant_type(attrs: dict[str, Any]) -> TensorType:
    v = attrs.get("value")
    dev = int(attrs.get("device", 0))
    if isinstance(v, DenseAttr) and all(attrs.get(k) is None for k in _CONSTANT_ATTRS[1:]):
        return TensorType(v.dtype, v.shape, dev)  # no copy of a large literal
    arr = _constant_array(attrs)
    return TensorType(DType.from_np(arr.dtype), arr.shape, dev)


@TYPE_RULES.register("Size")
def size_type(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    return (TensorType(_I64, (), tensor(args[0]).device),)


@MIXED_RULES.register("Size")
def size_mixed(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    """The element count, known from the type alone (like ``Shape``)."""
    t = tensor(args[0])
    return (Concrete(TensorType(_I64, (), t.device), np.array(t.numel, dtype=np.int64)),)


@TYPE_RULES.register("Constant")
def constant_type(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    return (_constant_type(attrs),)


@MIXED_RULES.register("Constant")
def constant_mixed(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    t = _constant_type(attrs)
    if t.numel > CONCRETE_LIMIT:
        return (t,)
    return (Concrete(t, _constant_array(attrs)),)


@TYPE_RULES.register("ConstantOfShape")
def constant_of_shape(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    t = tensor(args[0], "the shape input")
    if t.rank != 1 or t.dtype is not _I64:
        raise fail(f"the shape input must be a 1-D Int64 tensor, got {t}")
    shape = const_ints(args[0], "the shape input")
    if any(d < 0 for d in shape):
        raise fail(f"the shape {tuple(shape)} has a negative dimension")
    v = attrs.get("value")
    if v is None:
        dt = DType.Float32
    elif isinstance(v, DenseAttr) and v.numel == 1:
        dt = v.dtype
    else:
        raise fail("attribute value must be a one-element tensor (value=dense<Float32>[0.0])")
    return (TensorType(dt, tuple(shape), t.device),)


@TYPE_RULES.register("Range")
def range_(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    ts = [tensor(a, n) for a, n in zip(args, ("start", "limit", "delta"), strict=False)]
    for t, n in zip(ts, ("start", "limit", "delta"), strict=False):
        if t.numel != 1 or t.rank > 1:
            raise fail(f"{n} must be a scalar, got {t}")
    dt = same_dtype(ts, op_type)
    start, limit, delta = (const_array(a, n).reshape(()).item()
                           for a, n in zip(args, ("start", "limit", "delta"), strict=False))
    if delta == 0:
        raise fail("delta must not be 0")
    n = max(math.ceil((limit - start) / delta), 0)
    return (TensorType(dt, (n,), ts[0].device),)


# --- Reshaping ---------------------------------------------------------------------------------

@TYPE_RULES.register("Reshape")
def reshape(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    t = tensor(args[0])
    st = tensor(args[1], "the shape input")
    if st.rank != 1 or st.dtype is not _I64:
        raise fail(f"the shape input must be a 1-D Int64 tensor, got {st}")
    target = const_ints(args[1], "the shape input")
    allowzero = bool(attrs.get("allowzero", 0))
    out: list[int] = []
    infer_at = -1
    for i, d in enumerate(target):
        if d == -1:
            if infer_at >= 0:
                raise fail(f"the shape {tuple(target)} has more than one -1")
            infer_at = i
            out.append(1)
        elif d == 0 and not allowzero:
            if i >= t.rank:
                raise fail(f"the shape {tuple(target)} copies dimension {i} (a 0) of an input "
                           f"of rank {t.rank}")
            out.append(t.shape[i])
        elif d < 0:
            raise fail(f"the shape {tuple(target)} has a negative dimension {d}")
        else:
            out.append(d)
    if allowzero and infer_at >= 0 and 0 in target:
        raise fail(f"the shape {tuple(target)} has both -1 and 0 with allowzero=1")
    n = t.numel
    known = prod(out)
    if infer_at >= 0:
        if known == 0 or n % known:
            raise fail(f"cannot reshape {t.shape} ({n} elements) to {tuple(target)}")
        out[infer_at] = n // known
    elif known != n:
        raise fail(f"cannot reshape {t.shape} ({n} elements) to {tuple(target)} "
                   f"({known} elements)")
    return (t.with_shape(tuple(out)),)


@TYPE_RULES.register("Expand")
def expand(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    t = tensor(args[0])
    st = tensor(args[1], "the shape input")
    if st.rank != 1 or st.dtype is not _I64:
        raise fail(f"the shape input must be a 1-D Int64 tensor, got {st}")
    target = tuple(const_ints(args[1], "the shape input"))
    try:
        shape = broadcast_shapes(t.shape, target)
    except TypeInferenceError:
        raise fail(f"cannot expand {t.shape} to {target}: the shapes do not broadcast") from None
    return (t.with_shape(shape),)


@TYPE_RULES.register("Flatten")
def flatten(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    t = tensor(args[0])
    axis = attrs.get("axis", 1)
    if not -t.rank <= axis <= t.rank:
        raise fail(f"axis {axis} is out of range for rank {t.rank} (allowed: "
                   f"{-t.rank} to {t.rank})")
    if axis < 0:
        axis += t.rank
    return (t.with_shape((prod(t.shape[:axis]), prod(t.shape[axis:]))),)


@TYPE_RULES.register("Squeeze")
def squeeze(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    t = tensor(args[0])
    if len(args) < 2 or args[1] is None:
        return (t.with_shape(tuple(d for d in t.shape if d != 1)),)
    axes = norm_axes(const_ints(args[1], "the axes input"), t.rank)
    for a in axes:
        if t.shape[a] != 1:
            raise fail(f"cannot squeeze axis {a} of size {t.shape[a]} (shape {t.shape})")
    drop = set(axes)
    return (t.with_shape(tuple(d for i, d in enumerate(t.shape) if i not in drop)),)


@TYPE_RULES.register("Unsqueeze")
def unsqueeze(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    t = tensor(args[0])
    given = const_ints(args[1], "the axes input")
    rank = t.rank + len(given)
    axes = set(norm_axes(given, rank))
    it = iter(t.shape)
    return (t.with_shape(tuple(1 if i in axes else next(it) for i in range(rank))),)


@TYPE_RULES.register("Transpose")
def transpose(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    t = tensor(args[0])
    perm = attrs.get("perm")
    if perm is None:
        perm = tuple(range(t.rank - 1, -1, -1))
    if sorted(perm) != list(range(t.rank)):
        raise fail(f"perm {list(perm)} is not a permutation of the {t.rank} axes of {t.shape}")
    return (t.with_shape(tuple(t.shape[p] for p in perm)),)


@TYPE_RULES.register("Tile")
def tile(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    t = tensor(args[0])
    int_tensor(args[1], "the repeats input")
    reps = const_ints(args[1], "the repeats input")
    if len(reps) != t.rank:
        raise fail(f"repeats {reps} must have one entry per axis of {t.shape}")
    if any(r < 0 for r in reps):
        raise fail(f"repeats {reps} must not be negative")
    return (t.with_shape(tuple(d * r for d, r in zip(t.shape, reps, strict=False))),)


@TYPE_RULES.register("Trilu")
def trilu(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    t = tensor(args[0])
    if t.rank < 2:
        raise fail(f"the input must have rank >= 2, got {t.shape}")
    if len(args) > 1 and args[1] is not None:
        k = tensor(args[1], "k")
        if k.dtype is not _I64 or k.numel != 1:
            raise fail(f"k must be an Int64 scalar, got {k}")
    return (t,)


# --- Joining, splitting, indexing --------------------------------------------------------------

@TYPE_RULES.register("Concat")
def concat(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    ts = [tensor(a, f"input {i}") for i, a in enumerate(args)]
    first = ts[0]
    if first.rank == 0:
        raise fail("cannot concatenate scalars (rank 0): Unsqueeze them first")
    axis = norm_axis(attrs["axis"], first.rank)
    dt = same_dtype(ts, op_type)
    total = 0
    for i, t in enumerate(ts):
        if t.rank != first.rank or any(a != b for k, (a, b) in enumerate(
                zip(t.shape, first.shape, strict=False)) if k != axis):
            raise fail(f"input {i} has shape {t.shape}, input 0 has {first.shape}: they must "
                       f"agree except on axis {axis}")
        total += t.shape[axis]
    shape = first.shape[:axis] + (total,) + first.shape[axis + 1:]
    return (TensorType(dt, shape, first.device),)


def _split_sizes(d: int, n: int) -> list[int]:
    """ONNX 18+: chunks of ``ceil(d / n)``, the last one smaller when ``n`` does not divide."""
    chunk = -(-d // n)
    last = d - chunk * (n - 1)
    if last < 0:
        raise fail(f"cannot split a dimension of size {d} into {n} parts")
    return [chunk] * (n - 1) + [last]


@TYPE_RULES.register("Split")
def split(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    t = tensor(args[0])
    axis = norm_axis(attrs.get("axis", 0), t.rank)
    d = t.shape[axis]
    num = attrs.get("num_outputs")
    given = len(args) > 1 and args[1] is not None
    if given:
        if num is not None:
            raise fail("give either the split input or num_outputs, not both")
        sizes = const_ints(args[1], "the split input")
        if any(s < 0 for s in sizes) or sum(sizes) != d:
            raise fail(f"split sizes {sizes} must be non-negative and add up to {d}, the size "
                       f"of axis {axis} of {t.shape}")
    else:
        if num is None:
            num = n_out
        if num < 1:
            raise fail(f"num_outputs must be at least 1, got {num}")
        sizes = _split_sizes(d, num)
    if len(sizes) != n_out:
        raise fail(f"makes {len(sizes)} parts but {n_out} results are named")
    return tuple(t.with_shape(t.shape[:axis] + (s,) + t.shape[axis + 1:]) for s in sizes)


def _check_indices(ind: Any, size: int, axis: int) -> None:
    """When the indices are known, each must lie in ``[-size, size)``."""
    if isinstance(ind, Concrete):
        vals = np.asarray(ind.value)
        if vals.size and (vals.min() < -size or vals.max() >= size):
            bad = int(vals.min()) if vals.min() < -size else int(vals.max())
            raise fail(f"index {bad} is out of range for axis {axis} of size {size}")


@TYPE_RULES.register("Gather")
def gather(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    t = tensor(args[0], "data")
    ind = int_tensor(args[1], "indices")
    if t.rank == 0:
        raise fail("data must have rank >= 1, got a scalar")
    axis = norm_axis(attrs.get("axis", 0), t.rank)
    _check_indices(args[1], t.shape[axis], axis)
    return (t.with_shape(t.shape[:axis] + ind.shape + t.shape[axis + 1:]),)


def _slice_len(d: int, start: int, end: int, step: int) -> int:
    """The length of ONNX's ``Slice`` of one axis of size ``d`` (clamping per the spec)."""
    if start < 0:
        start += d
    if end < 0:
        end += d
    if step > 0:
        start = min(max(start, 0), d)
        end = min(max(end, 0), d)
        return max(0, -(-(end - start) // step))
    start = min(max(start, 0), d - 1)
    end = min(max(end, -1), d - 1)
    return max(0, -(-(start - end) // -step))


@TYPE_RULES.register("Slice")
def slice_(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    t = tensor(args[0])
    starts = const_ints(args[1], "the starts input")
    ends = const_ints(args[2], "the ends input")
    n = len(starts)
    if len(ends) != n:
        raise fail(f"starts {starts} and ends {ends} differ in length")
    axes_in = args[3] if len(args) > 3 else None
    steps_in = args[4] if len(args) > 4 else None
    axes = (list(range(n)) if axes_in is None
            else norm_axes(const_ints(axes_in, "the axes input"), t.rank))
    steps = [1] * n if steps_in is None else const_ints(steps_in, "the steps input")
    if len(axes) != n or len(steps) != n:
        raise fail(f"starts, ends, axes and steps must have one entry each per sliced axis, got "
                   f"{n}, {n}, {len(axes)} and {len(steps)}")
    if n > t.rank:
        raise fail(f"slices {n} axes of a tensor of rank {t.rank}")
    shape = list(t.shape)
    for a, s, e, p in zip(axes, starts, ends, steps, strict=False):
        if p == 0:
            raise fail(f"the step of axis {a} is 0")
        shape[a] = _slice_len(t.shape[a], s, e, p)
    return (t.with_shape(tuple(shape)),)


@TYPE_RULES.register("ScatterND")
def scatter_nd(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    data = tensor(args[0], "data")
    ind = tensor(args[1], "indices")
    upd = tensor(args[2], "updates")
    if ind.dtype is not _I64:
        raise fail(f"indices must be Int64, got {ind.dtype.value}")
    same_dtype([data, upd], op_type)
    if ind.rank < 1 or ind.shape[-1] > data.rank:
        raise fail(f"indices of shape {ind.shape} must have rank >= 1 and a last dimension "
                   f"<= {data.rank}, the rank of data")
    want = ind.shape[:-1] + data.shape[ind.shape[-1]:]
    if upd.shape != want:
        raise fail(f"updates must have shape {want} (indices {ind.shape}, data {data.shape}), "
                   f"got {upd.shape}")
    return (data,)


@TYPE_RULES.register("ArgMax")
def argmax(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    t = tensor(args[0])
    axis = norm_axis(attrs.get("axis", 0), t.rank)
    if attrs.get("keepdims", 1):
        shape = t.shape[:axis] + (1,) + t.shape[axis + 1:]
    else:
        shape = t.shape[:axis] + t.shape[axis + 1:]
    return (TensorType(_I64, shape, t.device),)
