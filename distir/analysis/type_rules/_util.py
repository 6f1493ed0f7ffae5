"""Helpers shared by type rules."""

from __future__ import annotations

from typing import Any

import numpy as np

from distir.analysis.values import Concrete, type_of
from distir.errors import TypeInferenceError
from distir.ir.types import DType, TensorType, Type

__all__ = ["tensor", "broadcast_shapes", "device_of", "norm_axis", "norm_axes", "const_ints",
           "const_array", "fail", "same_dtype", "int_tensor", "prod", "INT_DTYPES"]

INT_DTYPES = frozenset({DType.Int32, DType.Int64})
"""Index dtypes that ONNX accepts for indices (Gather, ScatterND, ...)."""


def fail(msg: str) -> TypeInferenceError:
    return TypeInferenceError(msg)


def tensor(a: Any, what: str = "input") -> TensorType:
    """The tensor type of an abstract value; an error for anything else."""
    t = a.type if isinstance(a, Concrete) else a
    if not isinstance(t, TensorType):
        raise fail(f"{what} must be a tensor, got {t}")
    return t


def device_of(args: tuple, attrs: dict[str, Any] | None = None) -> int:
    """The device of the first present input (the interpreter has checked they agree), or
    the ``device`` attribute of an input-less op (0 by default)."""
    for a in args:
        if a is not None:
            return type_of(a).devices[0]
    return int((attrs or {}).get("device", 0))


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy/ONNX multidirectional broadcasting."""
    s0 = shapes[0]
    for s in shapes:
        if s != s0:
            break
    else:
        return s0
    rank = max(len(s) for s in shapes)
    out = []
    for i in range(rank):
        d = 1
        for s in shapes:
            k = i - (rank - len(s))
            if k < 0:
                continue
            x = s[k]
            if x == 1:
                continue
            if d != 1 and x != d:
                raise fail("shapes " + ", ".join(str(s) for s in shapes)
                           + " do not broadcast")
            d = x
        out.append(d)
    # A zero-size dimension broadcasts against 1 only.
    return tuple(out)


def same_dtype(ts: list[TensorType], op_type: str) -> DType:
    dt = ts[0].dtype
    for t in ts[1:]:
        if t.dtype != dt:
            raise fail(f"inputs must have one dtype, got {dt.value} and {t.dtype.value}")
    return dt


def norm_axis(axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < max(rank, 1):
        raise fail(f"{what} {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def const_array(a: Any, what: str) -> np.ndarray:
    """The value of a concrete input; an error naming ``what`` if it is missing or abstract."""
    if a is None:
        raise fail(f"{what} is missing")
    if not isinstance(a, Concrete):
        raise fail(f"{what} must be known to infer the result shape, but it is computed from "
                   "abstract values; make it a Constant or derive it from Shape")
    return np.asarray(a.value)


def const_ints(a: Any, what: str) -> list[int]:
    """The integer values of a concrete input (shape, axes, ...), flattened; an error if it is
    abstract or not of an integer dtype."""
    arr = const_array(a, what)
    if arr.dtype.kind not in "iu":
        raise fail(f"{what} must be an integer tensor, got {type_of(a)}")
    return [int(x) for x in arr.reshape(-1)]


def int_tensor(a: Any, what: str) -> TensorType:
    """The type of an index input: an Int32 or Int64 tensor."""
    t = tensor(a, what)
    if t.dtype not in INT_DTYPES:
        raise fail(f"{what} must be Int32 or Int64, got {t.dtype.value}")
    return t


def norm_axes(axes: list[int] | tuple[int, ...], rank: int, what: str = "axes") -> list[int]:
    """Axes made non-negative; an error for one out of ``[-rank, rank)`` or a repeated one."""
    out = [norm_axis(a, rank, what) for a in axes]
    if len(set(out)) != len(out):
        raise fail(f"{what} {list(axes)} repeat an axis (rank {rank})")
    return out


def prod(dims: Any) -> int:
    """The product of integers (1 for none): an element count."""
    n = 1
    for d in dims:
        n *= d
    return n


def as_type(t: Type) -> Type:
    return t
