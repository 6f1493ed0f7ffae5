"""Type rules of indexing, sorting and contraction ops: GatherElements, GatherND,
ScatterElements, OneHot, NonZero, CumSum, TopK, ArgMin, Einsum.

Semantics are ONNX opset 21's; every result lives on the device of the inputs. Inputs that
fix a result shape (OneHot's depth, TopK's K) must be known (``const_ints``'s error
otherwise). ``NonZero``'s result shape depends on its input's values: it is typed only when
that input is known during type propagation (a constant, or computed from shapes).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from distir.analysis.rules import TYPE_RULES
from distir.analysis.type_rules._util import (
    broadcast_shapes,
    const_array,
    const_ints,
    fail,
    int_tensor,
    norm_axis,
    same_dtype,
    tensor,
)
from distir.analysis.type_rules.shape import argmax
from distir.analysis.values import Concrete
from distir.errors import TypeInferenceError
from distir.ir.types import DType, TensorType

_I64 = DType.Int64
_REDUCTIONS = ("none", "add", "mul", "max", "min")


@TYPE_RULES.register("GatherElements")
def gather_elements(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    """The result has the indices' shape and the data's dtype."""
    data = tensor(args[0], "data")
    ind = int_tensor(args[1], "indices")
    if data.rank == 0 or ind.rank != data.rank:
        raise fail(f"data and indices must have one rank >= 1, got {data.shape} and "
                   f"{ind.shape}")
    axis = norm_axis(attrs.get("axis", 0), data.rank)
    if any(i > d for k, (i, d) in enumerate(zip(ind.shape, data.shape, strict=True))
           if k != axis):
        raise fail(f"indices {ind.shape} must not exceed data {data.shape} on the axes other "
                   f"than {axis}")
    return (data.with_shape(ind.shape),)


@TYPE_RULES.register("GatherND")
def gather_nd(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    """``indices[..., :k]`` index the axes ``b .. b+k`` of data after ``b = batch_dims``
    shared leading axes: the result is ``indices.shape[:-1] + data.shape[b + k:]``."""
    data = tensor(args[0], "data")
    ind = tensor(args[1], "indices")
    if ind.dtype is not _I64:
        raise fail(f"indices must be Int64, got {ind.dtype.value}")
    b = attrs.get("batch_dims", 0)
    if ind.rank < 1 or not 0 <= b < min(data.rank, ind.rank):
        raise fail(f"batch_dims={b} must be below the ranks of data {data.shape} and "
                   f"indices {ind.shape} (indices of rank >= 1)")
    if data.shape[:b] != ind.shape[:b]:
        raise fail(f"the first {b} (batch) axes of data {data.shape} and indices {ind.shape} "
                   "differ")
    k = ind.shape[-1]
    if k > data.rank - b:
        raise fail(f"indices address {k} axes, but data {data.shape} has {data.rank - b} "
                   f"after {b} batch axes")
    return (data.with_shape(ind.shape[:-1] + data.shape[b + k:]),)


@TYPE_RULES.register("ScatterElements")
def scatter_elements(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    data = tensor(args[0], "data")
    ind = int_tensor(args[1], "indices")
    upd = tensor(args[2], "updates")
    same_dtype([data, upd], op_type)
    if data.rank == 0 or ind.rank != data.rank or upd.shape != ind.shape:
        raise fail(f"indices and updates must have one shape of the rank of data, got data "
                   f"{data.shape}, indices {ind.shape}, updates {upd.shape}")
    norm_axis(attrs.get("axis", 0), data.rank)
    if attrs.get("reduction", "none") not in _REDUCTIONS:
        raise fail(f"reduction must be one of {', '.join(_REDUCTIONS)}, got "
                   f"{attrs.get('reduction')!r}")
    return (data,)


@TYPE_RULES.register("OneHot")
def one_hot(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    """A new axis of size ``depth`` at ``axis``; the dtype of ``values`` (off, on)."""
    ind = tensor(args[0], "indices")
    dep = tensor(args[1], "depth")
    val = tensor(args[2], "values")
    if dep.numel != 1:
        raise fail(f"depth must hold one number, got {dep}")
    if val.shape != (2,):
        raise fail(f"values must be a 2-element tensor (off, on), got {val}")
    depth = const_array(args[1], "depth").reshape(-1)[0]
    if int(depth) != depth or depth < 1:
        raise fail(f"depth must be a positive integer, got {depth}")
    rank = ind.rank + 1
    axis = attrs.get("axis", -1)
    if not -rank <= axis < rank:
        raise fail(f"axis {axis} is out of range for a result of rank {rank}")
    axis %= rank
    shape = ind.shape[:axis] + (int(depth),) + ind.shape[axis:]
    return (TensorType(val.dtype, shape, ind.device),)


@TYPE_RULES.register("NonZero")
def nonzero(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    """``(rank, count)`` Int64: the count is the input's, so the input must be known."""
    x = tensor(args[0])
    if not isinstance(args[0], Concrete):
        raise fail("its result shape is the number of non-zero elements of its input, which "
                   "is computed at run time here; DistIR types shapes before the run, so "
                   "NonZero needs an input known before it (a Constant, or one computed from "
                   "shapes)")
    n = int(np.count_nonzero(np.asarray(args[0].value)))
    return (TensorType(_I64, (x.rank, n), x.device),)


@TYPE_RULES.register("CumSum")
def cumsum(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    x = tensor(args[0])
    ax = int_tensor(args[1], "axis")
    if ax.numel != 1 or ax.rank > 1:
        raise fail(f"axis must be a scalar, got {ax}")
    if x.rank == 0:
        raise fail("the input must have rank >= 1, got a scalar")
    if isinstance(args[1], Concrete):
        norm_axis(int(np.asarray(args[1].value).reshape(-1)[0]), x.rank)
    return (x,)


@TYPE_RULES.register("TopK")
def topk(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    """Values (X's dtype) and Int64 indices, with ``K`` entries along ``axis``."""
    x = tensor(args[0], "X")
    kt = tensor(args[1], "K")
    if kt.dtype is not _I64 or kt.shape != (1,):
        raise fail(f"K must be a 1-element Int64 tensor, got {kt}")
    (k,) = const_ints(args[1], "K")
    if x.rank == 0:
        raise fail("X must have rank >= 1, got a scalar")
    axis = norm_axis(attrs.get("axis", -1), x.rank)
    if not 0 <= k <= x.shape[axis]:
        raise fail(f"K={k} must lie in [0, {x.shape[axis]}], the size of axis {axis} of "
                   f"{x.shape}")
    shape = x.shape[:axis] + (k,) + x.shape[axis + 1:]
    return (x.with_shape(shape), TensorType(_I64, shape, x.device))


@TYPE_RULES.register("ArgMin")
def argmin(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    return argmax(op_type, args, attrs, n_out)


# --- Einsum --------------------------------------------------------------------------------

def _terms(equation: str, n_in: int) -> tuple[list[str], str | None]:
    """The input terms and the output term (``None``: implicit) of an equation, spaces
    removed; an error unless there is one term per input of letters and ``...``."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != n_in:
        raise fail(f"equation {equation!r} has {len(terms)} input terms for {n_in} inputs")
    for t in terms + ([rhs] if arrow else []):
        body = t.replace("...", "")
        if not all(c.isalpha() for c in body) or t.count("...") > 1 or "." in body:
            raise fail(f"equation {equation!r}: term {t!r} must be letters with at most one "
                       "'...'")
    return terms, (rhs if arrow else None)


def einsum_sizes(equation: str, shapes: list[tuple[int, ...]],
                 ) -> tuple[dict[str, int], tuple[int, ...], str]:
    """The size of each letter, the broadcast shape of ``...`` and the output term (the
    implicit one, when the equation has no ``->``: ``...`` then the letters used once, in
    alphabetical order)."""
    terms, out = _terms(equation, len(shapes))
    sizes: dict[str, int] = {}
    ell: list[tuple[int, ...]] = []
    for i, (term, shape) in enumerate(zip(terms, shapes, strict=True)):
        letters = term.replace("...", "")
        n_ell = len(shape) - len(letters)
        if n_ell < 0 or (n_ell and "..." not in term):
            raise fail(f"equation {equation!r}: term {term!r} does not match input {i} of "
                       f"shape {shape}")
        pre = term.index("...") if "..." in term else len(letters)
        ell.append(shape[pre:pre + n_ell])
        dims = shape[:pre] + shape[pre + n_ell:]
        for c, d in zip(letters, dims, strict=True):
            if sizes.setdefault(c, d) != d:
                raise fail(f"equation {equation!r}: '{c}' has sizes {sizes[c]} and {d}")
    try:
        ell_shape = broadcast_shapes(*ell) if ell else ()
    except TypeInferenceError:
        raise fail(f"equation {equation!r}: the '...' axes {ell} do not broadcast") from None
    if out is None:
        counts: dict[str, int] = {}
        for t in terms:
            for c in t.replace("...", ""):
                counts[c] = counts.get(c, 0) + 1
        out = ("..." if any("..." in t for t in terms) else "") + "".join(
            sorted(c for c, n in counts.items() if n == 1))
    for c in out.replace("...", ""):
        if c not in sizes or out.count(c) > 1:
            raise fail(f"equation {equation!r}: output letter '{c}' is not an input's or "
                       "repeats")
    return sizes, ell_shape, out


@TYPE_RULES.register("Einsum")
def einsum(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    ts = [tensor(a, f"input {i}") for i, a in enumerate(args)]
    eq = attrs.get("equation")
    if not isinstance(eq, str):
        raise fail("needs an equation attribute (equation=\"bij,bjk->bik\")")
    dt = same_dtype(ts, op_type)
    sizes, ell, out = einsum_sizes(eq, [t.shape for t in ts])
    head, dots, tail = out.partition("...")
    shape = [sizes[c] for c in head] + (list(ell) if dots else []) + [sizes[c] for c in tail]
    return (TensorType(dt, tuple(shape), ts[0].device),)
