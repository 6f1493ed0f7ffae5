"""Lowerings of the ONNX elementwise, shape and indexing ops (ONNX opset 21 semantics).

Static shapes do most of the work: ``Reshape``, ``Expand``, ``Squeeze``/``Unsqueeze``,
``Flatten``, ``ConstantOfShape`` and ``Split`` take their result shapes from the result
types, and index inputs known at compile time (``Slice`` bounds, ``Gather`` indices, axes)
become Python values once. Ops whose result may share its input's storage are registered
with ``view=True``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from distir.backend._dynamic import by_value, unknown
from distir.backend.lowering import LOWERINGS, Kernel, Static, torch_dtype
from distir.errors import UnsupportedError
from distir.ir.types import DenseAttr, DType

_UNARY: dict[str, Any] = {
    "Abs": torch.abs, "Neg": torch.neg, "Exp": torch.exp, "Log": torch.log,
    "Sqrt": torch.sqrt, "Reciprocal": torch.reciprocal, "Relu": torch.relu,
    "Sigmoid": torch.sigmoid, "Tanh": torch.tanh, "Erf": torch.erf, "Floor": torch.floor,
    "Ceil": torch.ceil, "Sin": torch.sin, "Cos": torch.cos, "Not": torch.logical_not,
    "Softplus": torch.nn.functional.softplus, "HardSwish": torch.nn.functional.hardswish,
    "Mish": torch.nn.functional.mish, "Round": torch.round, "Atan": torch.atan,
    "Sign": torch.sign, "Tan": torch.tan, "Asin": torch.asin, "Acos": torch.acos,
    "Sinh": torch.sinh, "Cosh": torch.cosh, "Asinh": torch.asinh, "Acosh": torch.acosh,
    "Atanh": torch.atanh, "Softsign": torch.nn.functional.softsign,
    "BitwiseNot": torch.bitwise_not,
}


@LOWERINGS.register(*_UNARY)
def _unary(s: Static) -> Kernel:
    f = _UNARY[s.op_type]
    return lambda x: (f(x),)


@LOWERINGS.register("Gelu")
def _gelu(s: Static) -> Kernel:
    approx = s.attrs.get("approximate", "none")
    if approx not in ("none", "tanh"):
        raise UnsupportedError(f"approximate={approx!r} (expected \"none\" or \"tanh\")")
    gelu = torch.nn.functional.gelu
    return lambda x: (gelu(x, approximate=approx),)


@LOWERINGS.register("LeakyRelu")
def _leaky_relu(s: Static) -> Kernel:
    alpha = float(s.attrs["alpha"])
    f = torch.nn.functional.leaky_relu
    return lambda x: (f(x, alpha),)


@LOWERINGS.register("HardSigmoid")
def _hard_sigmoid(s: Static) -> Kernel:
    alpha, beta = float(s.attrs["alpha"]), float(s.attrs["beta"])
    return lambda x: (torch.clamp(x * alpha + beta, 0.0, 1.0),)


@LOWERINGS.register("Celu")
def _celu(s: Static) -> Kernel:
    alpha = float(s.attrs["alpha"])
    f = torch.nn.functional.celu
    return lambda x: (f(x, alpha),)


@LOWERINGS.register("ThresholdedRelu")
def _thresholded_relu(s: Static) -> Kernel:
    alpha = float(s.attrs["alpha"])
    return lambda x: (torch.where(x > alpha, x, torch.zeros_like(x)),)


@LOWERINGS.register("Shrink")
def _shrink(s: Static) -> Kernel:
    bias, lambd = float(s.attrs["bias"]), float(s.attrs["lambd"])

    def k(x: torch.Tensor) -> tuple:
        zero = torch.zeros_like(x)
        return (torch.where(x < -lambd, x + bias, torch.where(x > lambd, x - bias, zero)),)

    return k


_BITWISE: dict[str, Any] = {"BitwiseAnd": torch.bitwise_and, "BitwiseOr": torch.bitwise_or,
                            "BitwiseXor": torch.bitwise_xor}


@LOWERINGS.register(*_BITWISE)
def _bitwise(s: Static) -> Kernel:
    f = _BITWISE[s.op_type]
    return lambda a, b: (f(a, b),)


@LOWERINGS.register("Size", cached=True)
def _size(s: Static) -> Kernel:
    n = torch.tensor(s.inp(0).numel, dtype=torch.int64, device=s.device)
    return lambda _x: (n,)


@LOWERINGS.register("Elu")
def _elu(s: Static) -> Kernel:
    alpha = float(s.attrs["alpha"])
    f = torch.nn.functional.elu
    return lambda x: (f(x, alpha),)


@LOWERINGS.register("Selu")
def _selu(s: Static) -> Kernel:
    alpha, gamma = float(s.attrs["alpha"]), float(s.attrs["gamma"])
    return lambda x: (torch.where(x > 0, x, torch.expm1(x) * alpha) * gamma,)


@LOWERINGS.register("PRelu")
def _prelu(s: Static) -> Kernel:
    return lambda x, slope: (torch.where(x < 0, x * slope, x),)


@LOWERINGS.register("IsInf")
def _isinf(s: Static) -> Kernel:
    neg, pos = bool(s.attrs["detect_negative"]), bool(s.attrs["detect_positive"])
    f = torch.isinf if neg and pos else torch.isneginf if neg else torch.isposinf
    if not neg and not pos:
        return lambda x: (torch.zeros_like(x, dtype=torch.bool),)
    return lambda x: (f(x),)


@LOWERINGS.register("Mod")
def _mod(s: Static) -> Kernel:
    # fmod=1: the sign of the dividend (C fmod); fmod=0: the sign of the divisor.
    f = torch.fmod if int(s.attrs["fmod"]) else torch.remainder
    return lambda a, b: (f(a, b),)


@LOWERINGS.register("Identity", "Dropout", view=True)
def _identity(s: Static) -> Kernel:
    if s.op_type == "Dropout":
        mode = s.const(2)
        if len(s.in_types) > 2 and s.in_types[2] is not None and (mode is None or bool(mode)):
            raise UnsupportedError("Dropout in training mode is random and has no reference "
                                   "result; give training_mode=false (the default)")
        if len(s.out_types) == 2:
            shape = s.out(1).shape
            dev = s.device
            return lambda x, *_: (x, torch.ones(shape, dtype=torch.bool, device=dev))
    return lambda x, *_: (x,)


def _scalar(s: Static, i: int) -> float | int | None:
    """Input i as a Python number, when it is a known single element whose broadcast does
    not change the result's shape (so ``op(x, number)`` computes the same thing)."""
    c = s.const(i)
    if c is None or c.size != 1 or s.in_types[1 - i] is None:
        return None
    if s.inp(1 - i).shape != s.out().shape or s.inp(i).dtype != s.inp(1 - i).dtype:
        return None
    return c.reshape(-1)[0].item()


_BINARY: dict[str, Any] = {"Add": torch.add, "Sub": torch.sub, "Mul": torch.mul}


@LOWERINGS.register("Add", "Sub", "Mul", "Div")
def _binary(s: Static) -> Kernel:
    is_int = not s.out().dtype.is_float
    f: Any
    if s.op_type == "Div":
        if is_int:
            return lambda a, b: (torch.div(a, b, rounding_mode="trunc"),)
        f = torch.div
    else:
        f = _BINARY[s.op_type]
    c = _scalar(s, 1)
    if c is not None:
        return lambda a, _b: (f(a, c),)
    c = _scalar(s, 0)
    if c is not None and s.op_type in ("Add", "Mul"):
        return lambda _a, b: (f(b, c),)
    if c is not None and s.op_type == "Sub":
        # ``c - b`` with ``c`` a Python number, passed to the kernel by value as for
        # ``b * c``, where a 0-d device tensor is one more (broadcast) operand: ``1 -
        # sigmoid(x)`` in each SiLU gradient of EfficientNet-B0's replayed step took 31.8
        # us so, against its ``Sigmoid``'s 21.1 on the same tensors
        # (grid_search/results/index_adam/call_e/; this way not yet timed on a GPU).
        return lambda _a, b: (torch.rsub(b, c),)
    return lambda a, b: (f(a, b),)


@LOWERINGS.register("Pow")
def _pow(s: Static) -> Kernel:
    dt = torch_dtype(s.out().dtype)
    c = s.const(1)
    if c is not None and c.size == 1 and s.inp(0).shape == s.out().shape:
        v = c.reshape(-1)[0].item()
        # An integer power of integers stays exact: a Python float would compute it in
        # floating point.
        e = float(v) if s.out().dtype.is_float else int(v)
        if e == 2:
            return lambda x, _y: (x * x,)
        return lambda x, _y: (torch.pow(x, e).to(dt),)
    return lambda x, y: (torch.pow(x, y).to(dt),)


_VARIADIC: dict[str, Any] = {"Sum": torch.add, "Max": torch.maximum, "Min": torch.minimum,
                             "Mean": torch.add}


@LOWERINGS.register("Sum", "Max", "Min", "Mean")
def _variadic(s: Static) -> Kernel:
    f = _VARIADIC[s.op_type]
    if s.op_type == "Mean":
        n = len(s.in_types)

        def mean(*xs: torch.Tensor) -> tuple:
            acc = xs[0]
            for x in xs[1:]:
                acc = acc + x
            return (acc / n,)

        return mean

    def k(*xs: torch.Tensor) -> tuple:
        acc = xs[0]
        for x in xs[1:]:
            acc = f(acc, x)
        return (acc,)

    if len(s.in_types) == 1:
        return lambda x: (x.clone(),)
    return k


_COMPARE = {"Equal": torch.eq, "Less": torch.lt, "Greater": torch.gt,
            "LessOrEqual": torch.le, "GreaterOrEqual": torch.ge,
            "And": torch.logical_and, "Or": torch.logical_or, "Xor": torch.logical_xor}


@LOWERINGS.register(*_COMPARE)
def _compare(s: Static) -> Kernel:
    f = _COMPARE[s.op_type]
    return lambda a, b: (f(a, b),)


@LOWERINGS.register("Where")
def _where(s: Static) -> Kernel:
    """``torch.where``; a known single-element branch (the ``-inf`` of a mask) is passed as
    a number when the other branch has the result's shape and dtype: a 0-d tensor would be
    one more broadcast operand, on PyTorch's slower strided path."""
    for i, other in ((1, 2), (2, 1)):
        c = s.const(i)
        if c is None or c.size != 1 or s.in_types[other] is None:
            continue
        if s.inp(other).shape != s.out().shape or s.inp(i).dtype != s.inp(other).dtype:
            continue
        v = c.reshape(-1)[0].item()
        if i == 1:
            return lambda cond, _x, y: (torch.where(cond, v, y),)
        return lambda cond, x, _y: (torch.where(cond, x, v),)
    return lambda c, x, y: (torch.where(c, x, y),)


@LOWERINGS.register("Clip")
def _clip(s: Static) -> Kernel:
    lo, hi = s.const(1), s.const(2)
    if (len(s.in_types) < 2 or s.in_types[1] is None or lo is not None) and \
            (len(s.in_types) < 3 or s.in_types[2] is None or hi is not None):
        a = None if lo is None else lo.reshape(-1)[0].item()
        b = None if hi is None else hi.reshape(-1)[0].item()
        return lambda x, *_: (torch.clamp(x, a, b),)
    return lambda x, lo=None, hi=None: (torch.clamp(x, lo, hi),)


@LOWERINGS.register("Cast", "CastLike", view=True)
def _cast(s: Static) -> Kernel:
    dt = torch_dtype(s.out().dtype)  # float to int truncates toward zero, as in ONNX
    return lambda x, *_: (x.to(dt),)


# ---- shapes -------------------------------------------------------------------------------


def _dense_value(v: Any, dtype: DType | None = None) -> np.ndarray:
    if isinstance(v, DenseAttr):
        return np.array(v.array)
    return np.asarray(v, dtype=None if dtype is None else dtype.np)


def _to_tensor(a: np.ndarray, t_dtype: DType, device: Any) -> torch.Tensor:
    arr = np.ascontiguousarray(a).reshape(np.shape(a))  # ascontiguousarray makes 0-d 1-d
    if t_dtype is DType.BFloat16:
        return torch.from_numpy(arr.view(np.uint16).copy()).view(torch.bfloat16).to(device)
    return torch.from_numpy(arr.astype(t_dtype.np, copy=True)).to(device)


@LOWERINGS.register("Constant", cached=True)
def _constant(s: Static) -> Kernel:
    t = s.out()
    a = s.attrs
    for key in ("value", "value_float", "value_int", "value_floats", "value_ints"):
        if a.get(key) is not None:
            arr = _dense_value(a[key]).reshape(t.shape)
            break
    else:
        raise UnsupportedError("a Constant needs value=, value_float(s)= or value_int(s)=")
    tensor = _to_tensor(arr, t.dtype, s.device)
    return lambda: (tensor,)


@LOWERINGS.register("ConstantOfShape")
def _constant_of_shape(s: Static) -> Kernel:
    t = s.out()
    v = s.attrs.get("value")
    fill = 0.0 if v is None else _dense_value(v).reshape(-1)[0].item()
    dt, dev, shape = torch_dtype(t.dtype), s.device, t.shape
    return lambda _shape: (torch.full(shape, fill, dtype=dt, device=dev),)


@LOWERINGS.register("Shape", cached=True)
def _shape(s: Static) -> Kernel:
    shape = s.inp(0).shape
    start = s.attrs.get("start", 0) or 0
    end = s.attrs.get("end")
    vals = torch.tensor(shape[start:end], dtype=torch.int64, device=s.device)
    return lambda _x: (vals,)


@LOWERINGS.register("Range", cached=True)
def _range(s: Static) -> Kernel:
    t = s.out()
    dt, dev = torch_dtype(t.dtype), s.device
    c0, c2 = s.const(0), s.const(2)
    if c0 is not None and c2 is not None and s.const(1) is not None:
        start = c0.reshape(-1)[0].item()
        delta = c2.reshape(-1)[0].item()
        vals = torch.arange(t.shape[0], dtype=dt, device=dev) * delta + start
        vals = vals.to(dt)
        return lambda *_: (vals,)
    n = t.shape[0]
    return lambda a, _l, d: ((torch.arange(n, device=dev) * d + a).to(dt),)


@LOWERINGS.register("Reshape", "Flatten", "Squeeze", "Unsqueeze", view=True)
def _reshape(s: Static) -> Kernel:
    shape = s.out().shape
    return lambda x, *_: (x.reshape(shape),)


@LOWERINGS.register("Expand", view=True)
def _expand(s: Static) -> Kernel:
    shape = s.out().shape
    return lambda x, _shape: (x.expand(shape),)


@LOWERINGS.register("Transpose", view=True)
def _transpose(s: Static) -> Kernel:
    """A view, except where the permutation moves a batch axis (any axis but the last two),
    or the last axis of a tensor whose rows are not aligned for the matmul kernels
    (``copied_transpose``): then the tensor is made contiguous here, once, as the cost
    model charges it. As a view, every reader that needs it contiguous would copy it
    again (``torch.matmul`` merging its batch axes, a ``Reshape`` merging the permuted
    axes), and an elementwise reader would run uncoalesced and hand the strides on:
    measured on the held-out transformer's replayed steps, such copies took 8.6 ms of a
    122-ms step against the 4.8 ms of one copy per transpose (docs/fidelity.md). A
    permutation that moves only axes of length 1 is a reshape (``only_unit_axes_move``)."""
    from distir.analysis.cost.compute import copied_transpose, only_unit_axes_move

    x_t = s.inp(0)
    rank = x_t.rank
    perm = s.attrs.get("perm")
    perm = tuple(range(rank - 1, -1, -1)) if perm is None else tuple(int(p) for p in perm)
    if only_unit_axes_move(tuple(x_t.shape), perm):  # a reshape, with contiguous strides
        shape = s.out().shape
        return lambda x: (x.reshape(shape),)
    if copied_transpose(tuple(x_t.shape), x_t.dtype.itemsize, perm):
        return lambda x: (x.permute(perm).contiguous(),)
    return lambda x: (x.permute(perm),)


@LOWERINGS.register("Split", view=True)
def _split(s: Static) -> Kernel:
    rank = s.inp(0).rank
    axis = int(s.attrs.get("axis", 0)) % max(rank, 1)
    sizes = [t.shape[axis] for t in (s.out(j) for j in range(len(s.out_types)))]
    return lambda x, *_: tuple(torch.split(x, sizes, dim=axis))


@LOWERINGS.register("Concat")
def _concat(s: Static) -> Kernel:
    axis = int(s.attrs["axis"]) % max(s.out().rank, 1)
    return lambda *xs: (torch.cat(xs, dim=axis),)


@LOWERINGS.register("Gather")
def _gather(s: Static) -> Kernel:
    data = s.inp(0)
    axis = int(s.attrs.get("axis", 0)) % max(data.rank, 1)
    n = data.shape[axis]
    idx_t = s.inp(1)
    out_shape = s.out().shape
    c = s.const(1)
    if c is not None:
        idx = np.where(c < 0, c + n, c).astype(np.int64)
        if idx.ndim == 0:
            # A copy, as index_select makes: the program does not treat a Gather's result
            # as a view of its data, so a later op may overwrite it in place.
            i0 = int(idx)
            return lambda x, _i: (x.select(axis, i0).clone(),)
        flat = torch.from_numpy(idx.reshape(-1).copy()).to(s.device)
        return lambda x, _i: (x.index_select(axis, flat).reshape(out_shape),)
    if axis == 0 and data.rank == 2:
        emb = torch.nn.functional.embedding

        def k_emb(x: torch.Tensor, i: torch.Tensor) -> tuple:
            i = torch.where(i < 0, i + n, i) if idx_t.dtype is not DType.Bool else i
            return (emb(i, x),)

        return k_emb

    def k(x: torch.Tensor, i: torch.Tensor) -> tuple:
        i = torch.where(i < 0, i + n, i).reshape(-1)
        return (x.index_select(axis, i).reshape(out_shape),)

    return k


def _ints(s: Static, i: int, what: str) -> list[int] | None:
    if i >= len(s.in_types) or s.in_types[i] is None:
        return None
    c = s.const(i)
    if c is None:
        raise UnsupportedError(f"{what} must be known before the run (a Constant or derived "
                               "from shapes)")
    return [int(x) for x in c.reshape(-1)]


@LOWERINGS.register("Slice", view=True)
def _slice(s: Static) -> Kernel:
    if unknown(s, (1, 2, 3, 4)):
        return by_value(s, (1, 2, 3, 4), _slice)
    shape = s.inp(0).shape
    rank = len(shape)
    starts = _ints(s, 1, "the starts of Slice") or []
    ends = _ints(s, 2, "the ends of Slice") or []
    axes = _ints(s, 3, "the axes of Slice") or list(range(len(starts)))
    steps = _ints(s, 4, "the steps of Slice") or [1] * len(starts)
    index: list[Any] = [slice(None)] * rank
    flips: list[tuple[int, torch.Tensor]] = []
    for st, en, ax, sp in zip(starts, ends, axes, steps):
        ax %= rank
        lo, hi, step = slice(st, en, sp).indices(shape[ax])
        if sp > 0:
            index[ax] = slice(lo, hi, step)
        else:
            sel = torch.tensor(list(range(lo, hi, step)), dtype=torch.int64, device=s.device)
            flips.append((ax, sel))
    key = tuple(index)
    if not flips:
        return lambda x, *_: (x[key],)

    def k(x: torch.Tensor, *_: Any) -> tuple:
        y = x[key]
        for ax, sel in flips:
            y = y.index_select(ax, sel)
        return (y,)

    return k


@LOWERINGS.register("Tile")
def _tile(s: Static) -> Kernel:
    reps = tuple(o // i if i else 1 for o, i in zip(s.out().shape, s.inp(0).shape))
    return lambda x, _r: (x.repeat(reps),)


@LOWERINGS.register("Trilu")
def _trilu(s: Static) -> Kernel:
    if unknown(s, (1,)):
        return by_value(s, (1,), _trilu)
    k = 0
    if len(s.in_types) > 1 and s.in_types[1] is not None:
        c = s.const(1)
        if c is None:
            raise UnsupportedError("the k of Trilu must be known before the run")
        k = int(c.reshape(-1)[0])
    f = torch.triu if int(s.attrs.get("upper", 1)) else torch.tril
    return lambda x, *_: (f(x, k),)


@LOWERINGS.register("IsNaN")
def _isnan(s: Static) -> Kernel:
    return lambda x: (torch.isnan(x),)


@LOWERINGS.register("ArgMax", "ArgMin")
def _argmax(s: Static) -> Kernel:
    rank = s.inp(0).rank
    axis = int(s.attrs.get("axis", 0)) % max(rank, 1)
    keep = bool(s.attrs.get("keepdims", 1))
    f = torch.argmax if s.op_type == "ArgMax" else torch.argmin
    if int(s.attrs.get("select_last_index", 0)):
        n = s.inp(0).shape[axis]
        return lambda x: ((n - 1 - f(x.flip(axis), dim=axis, keepdim=keep)),)
    return lambda x: (f(x, dim=axis, keepdim=keep),)


def _scatter_add_rows(s: Static) -> Kernel:
    """An adding ``ScatterND`` of whole rows (index depth 1: the gradient of a ``Gather``,
    an embedding's) by PyTorch's embedding backward, which sorts the indices and sums each
    run of equal ones in parallel segments, then added to ``data``. An accumulating
    ``index_put_`` adds a run serially: 10.7 ms on an H200 for BERT's token-type gradient
    (16,384 rows of 768 into row 0), where this takes a fraction of a millisecond. The sums
    are those of ``index_put_`` up to their order of addition.

    A few rows (``few_scatter_rows``: the gradient of a ``Gather`` of one wide slice) go by
    ``index_add`` instead, parallel over every element of the rows: the embedding
    backward gives each distinct index one segment, so one row of millions of elements
    runs several times slower than a copy."""
    from distir.analysis.cost.compute import few_scatter_rows

    n = s.inp(0).shape[0]
    if few_scatter_rows(s.inp(1)):
        def few(data: torch.Tensor, idx: torch.Tensor, upd: torch.Tensor) -> tuple:
            flat = idx.reshape(-1)
            flat = torch.where(flat < 0, flat + n, flat)
            rows = upd.reshape(flat.shape[0], *data.shape[1:]).to(data.dtype)
            return (data.index_add(0, flat, rows),)

        return few

    def k(data: torch.Tensor, idx: torch.Tensor, upd: torch.Tensor) -> tuple:
        flat = idx.reshape(-1)
        flat = torch.where(flat < 0, flat + n, flat)  # ONNX's negative indices
        rows = upd.reshape(flat.shape[0], -1)
        g = torch.ops.aten.embedding_dense_backward(rows, flat, n, -1, False)
        return ((data + g.view(data.shape)).to(data.dtype),)

    return k


@LOWERINGS.register("ScatterND")
def _scatter_nd(s: Static) -> Kernel:
    red = s.attrs.get("reduction", "none")
    if red not in ("none", "add", "mul"):
        raise UnsupportedError(f"ScatterND with reduction={red!r}")
    depth = s.inp(1).shape[-1]
    if red == "add" and depth == 1 and s.inp(0).dtype.is_float:
        return _scatter_add_rows(s)

    def k(data: torch.Tensor, idx: torch.Tensor, upd: torch.Tensor) -> tuple:
        out = data.clone()
        flat = idx.reshape(-1, depth)
        key = tuple(flat[:, j] for j in range(depth))
        vals = upd.reshape(flat.shape[0], *data.shape[depth:])
        if red == "mul":
            out[key] = out[key] * vals  # ONNX: no repeated indices
        else:
            out.index_put_(key, vals, accumulate=red == "add")
        return (out,)

    return k
