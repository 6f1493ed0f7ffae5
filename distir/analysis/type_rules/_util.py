"""Helpers shared by type rules."""

from __future__ import annotations

from typing import Any

import numpy as np

from distir.errors import TypeInferenceError
from distir.analysis.values import Concrete, type_of
from distir.ir.types import DType, TensorType, Type

__all__ = ["tensor", "broadcast_shapes", "device_of", "norm_axis", "const_ints", "fail",
           "same_dtype"]


def fail(msg: str) -> TypeInferenceError:
    return TypeInferenceError(msg)


def tensor(a: Any, what: str = "input") -> TensorType:
    """The tensor type of an abstract value; an error for anything else."""
    t = type_of(a)
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
            raise fail(f"{op_type} needs inputs of one dtype, got {dt.value} and {t.dtype.value}")
    return dt


def norm_axis(axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < max(rank, 1):
        raise fail(f"{what} {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def const_ints(a: Any, what: str) -> list[int]:
    """The integer values of a concrete input (shape, axes, ...); an error if abstract."""
    if a is None:
        raise fail(f"{what} is missing")
    if not isinstance(a, Concrete):
        raise fail(f"{what} must be known to infer the result shape, but it is computed from "
                   "abstract values; make it a Constant or derive it from Shape")
    return [int(x) for x in np.asarray(a.value).reshape(-1)]


def as_type(t: Type) -> Type:
    return t
