"""Lowerings whose small operands arrive at run time.

A lowering reads index operands (axes, slice bounds, pads, scales) once at compile time
when the program fixes them (``Static.const``: a ``Constant``). An imported model may
instead pass them as parameters bound to initializers (``torch.onnx``'s dynamo exporter
does), which type propagation knows but a rank program does not. ``by_value`` then makes a
kernel that reads those operands when it runs (one small device-to-host copy per call),
compiles the lowering for their values, and keeps the compiled kernel per distinct value,
so a repeated step compiles once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from distir.backend.lowering import Kernel, Static

__all__ = ["by_value", "unknown"]


def unknown(s: Static, indices: tuple[int, ...]) -> bool:
    """Whether one of the given inputs is present but not known at compile time."""
    return any(i < len(s.in_types) and s.in_types[i] is not None and s.const(i) is None
               for i in indices)


def by_value(s: Static, indices: tuple[int, ...], make: Callable[[Static], Kernel]) -> Kernel:
    """A kernel that compiles ``make`` with inputs ``indices`` known, reading them from its
    arguments on each call (compiled kernels are cached by value)."""
    cache: dict[tuple, Kernel] = {}
    n = len(s.in_types)

    def k(*xs: Any) -> tuple:
        vals = [None if i >= len(xs) or xs[i] is None else
                np.asarray(xs[i].detach().cpu().numpy()) for i in indices]
        key = tuple(None if v is None else (v.dtype.str, v.shape, v.tobytes()) for v in vals)
        kern = cache.get(key)
        if kern is None:
            consts = list(s.consts) + [None] * (n - len(s.consts))
            for i, v in zip(indices, vals, strict=True):
                if i < n:
                    consts[i] = v
            kern = cache[key] = make(dataclasses.replace(s, consts=tuple(consts)))
        return kern(*xs)

    return k
