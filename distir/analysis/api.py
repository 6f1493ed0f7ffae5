"""Type inference and reference execution: the user-facing entry points."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from distir.analysis.interpreter import NumpyInterpreter, TypeInterpreter
from distir.analysis.state import state_roles
from distir.analysis.values import CONCRETE_LIMIT, make_concrete, type_of
from distir.errors import ExecutionError, TypeInferenceError
from distir.ir.core import Function, Module, Value
from distir.ir.types import DType, TensorType, Type

__all__ = ["infer_types", "type_env", "infer_module_types", "execute", "bind_inputs",
           "random_inputs", "host_memory_needed", "check_host_memory", "available_host_memory"]


KNOWN_INITIALIZER_ELEMENTS = 4096
"""An initializer of at most this many elements enters the interpreters as a known value
(shapes, axes and small constants fold through it); a larger one as its type only."""


def _input_values(fn: Function, input_types: Sequence[Type | None] | None) -> list[Any]:
    """The abstract arguments of ``fn``: declared types, overridden by ``input_types``;
    initializer-bound parameters become concrete when small."""
    params = fn.params
    if input_types is not None and len(input_types) != len(params):
        free = [p for p in params if p.name not in fn.initializers]
        if len(input_types) != len(free):
            raise TypeInferenceError(f"@{fn.name} takes {len(free)} inputs, "
                                     f"{len(input_types)} types given", fn.loc)
        it = iter(input_types)
        given = [None if p.name in fn.initializers else next(it) for p in params]
    else:
        given = list(input_types) if input_types is not None else [None] * len(params)
    args: list[Any] = []
    for p, g in zip(params, given):
        t = g if g is not None else p.type
        if t is None and p.name in fn.initializers:
            arr = np.asarray(fn.initializers[p.name])
            t = TensorType(DType.from_np(arr.dtype), arr.shape, 0)
        if t is None:
            raise TypeInferenceError(f"parameter %{p.name} of @{fn.name} has no type: "
                                     "declare it or pass input types", p.loc or fn.loc)
        if p.name in fn.initializers and isinstance(t, TensorType) and \
                t.numel <= KNOWN_INITIALIZER_ELEMENTS:
            args.append(make_concrete(np.asarray(fn.initializers[p.name]), t.device))
        else:
            args.append(t)
    return args


def infer_types(fn: Function | Module, input_types: Sequence[Type | None] | None = None,
                ) -> tuple[Type, ...]:
    """The types of ``fn``'s results. Raises ``TypeInferenceError`` (or ``PlacementError``)
    at the first op whose inputs do not fit its rule."""
    if isinstance(fn, Module):
        fn = fn.entry
    outs = TypeInterpreter().run(fn, _input_values(fn, input_types))
    return tuple(type_of(o) for o in outs)


def type_env(fn: Function, input_types: Sequence[Type | None] | None = None,
             ) -> dict[Value, Any]:
    """The abstract value (``Type`` or ``Concrete``) of every value of ``fn``."""
    record: dict[Value, Any] = {}
    TypeInterpreter(record=record).run(fn, _input_values(fn, input_types))
    return record


def infer_module_types(m: Module) -> dict[Value, Type]:
    """Types of every value of the module's typed functions (the entry first), for
    ``distir check --types``; generic functions are typed through the entry's calls."""
    record: dict[Value, Any] = {}
    interp = TypeInterpreter(record=record)
    entry = m.entry
    interp.run(entry, _input_values(entry, None))
    for f in m:
        if f is not entry and f.is_typed and f.params and f.params[0] not in record:
            interp.run(f, [p.type for p in f.params])
    return {v: type_of(a) for v, a in record.items() if a is not None}


def bind_inputs(fn: Function, inputs: Sequence[Any]) -> list[np.ndarray]:
    """All of ``fn``'s arguments: ``inputs`` for the free parameters in order, initializer
    values for the bound ones (or ``inputs`` for all parameters, when that many are given)."""
    params = fn.params
    if len(inputs) == len(params):
        return [np.asarray(x) for x in inputs]
    free = [p for p in params if p.name not in fn.initializers]
    if len(inputs) != len(free):
        names = ", ".join("%" + str(p.name) for p in free)
        raise ExecutionError(f"@{fn.name} takes {len(free)} inputs ({names}), "
                             f"{len(inputs)} given", fn.loc)
    it = iter(inputs)
    return [np.asarray(fn.initializers[p.name]) if p.name in fn.initializers
            else np.asarray(next(it)) for p in params]


def execute(fn: Function | Module, inputs: Sequence[Any], *, check_types: bool = True,
            ) -> list[np.ndarray]:
    """Run ``fn`` on numpy inputs with the reference semantics of every op.

    The types of the inputs are inferred first (placement and annotations are checked), so
    a badly placed op is reported before anything runs.
    """
    if isinstance(fn, Module):
        fn = fn.entry
    args = bind_inputs(fn, inputs)
    if check_types:
        in_types: list[Any] = []
        for p, a in zip(fn.params, args):
            dev = p.type.devices[0] if p.type is not None and p.type.devices else 0
            try:
                dt = DType.from_np(a.dtype)
            except KeyError:
                raise ExecutionError(f"input %{p.name} has dtype {a.dtype}, which DistIR does "
                                     "not support", p.loc) from None
            # Small inputs are known values here (shapes, axes, initializers): keep them
            # concrete so that ops whose result shape depends on them type-check.
            if a.size <= CONCRETE_LIMIT:
                in_types.append(make_concrete(a, dev))
            else:
                in_types.append(TensorType(dt, tuple(a.shape), dev))
        record: dict[Value, Any] = {}
        TypeInterpreter(record=record).run(fn, in_types)
        check_host_memory(fn, record)
    return list(NumpyInterpreter().run(fn, args))


def _bytes(t: Any) -> int:
    try:
        return int(type_of(t).size_bytes)
    except (AttributeError, TypeError):
        return 0


def host_memory_needed(fn: Function, record: dict[Value, Any] | None = None,
                       ) -> tuple[int, int, Value | None, int]:
    """A lower bound of what reference execution of ``fn`` holds at once, in bytes, from
    types alone: ``(total, inputs, largest result, its bytes)``. Every argument is held for
    the whole run, and the largest op result is made while they are; ``record`` is a type
    environment already computed (``type_env``), or ``None`` to compute one."""
    if record is None:
        record = type_env(fn)
    inputs = sum(_bytes(record[p]) for p in fn.params if p in record)
    biggest, big = None, 0
    for op in fn.ops:
        for v in op.outputs:
            a = record.get(v)
            b = _bytes(a) if a is not None else 0
            if b > big:
                biggest, big = v, b
    return inputs + big, inputs, biggest, big


def available_host_memory() -> int | None:
    """Bytes this machine can still allocate (``MemAvailable``), or ``None`` if unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        import os

        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return None


def _gib(b: int) -> str:
    return f"{b / 2**30:,.1f} GiB" if b >= 2**27 else f"{b / 2**20:,.1f} MiB"


def check_host_memory(fn: Function, record: dict[Value, Any] | None = None,
                      available: int | None = None) -> None:
    """Raise a one-line ``ExecutionError`` before anything is allocated when executing
    ``fn`` on this machine would need more memory than it has available."""
    avail = available_host_memory() if available is None else available
    if avail is None:
        return
    total, inputs, biggest, big = host_memory_needed(fn, record)
    if total <= avail:
        return
    what = f"its inputs ({_gib(inputs)})"
    if biggest is not None and big:
        what += f" and its largest result %{biggest.name} ({_gib(big)})"
    raise ExecutionError(f"executing @{fn.name} needs at least {_gib(total)}: {what}, more "
                         f"than the {_gib(avail)} this machine has available; bind smaller "
                         "dimensions (distir import --dim) or a smaller batch", fn.loc)


def random_inputs(fn: Function, seed: int = 0) -> list[np.ndarray]:
    """Random values for ``fn``'s free parameters (those without initializers): normal for
    floats, small non-negative integers for integers; an optimizer's state as a training
    step holds it (``distir.analysis.state``: Adam's second moments squares, its step
    count 1). Refuses in one line, before
    allocating, inputs larger than the memory this machine has available."""
    avail = available_host_memory()
    if avail is not None:
        sizes = [p.type.size_bytes for p in fn.params
                 if p.name not in fn.initializers and isinstance(p.type, TensorType)]
        # Values are drawn in float64 before the cast: one such copy at a time.
        temp = max((p.type.numel * 8 for p in fn.params if p.name not in fn.initializers
                    and isinstance(p.type, TensorType) and p.type.dtype.is_float), default=0)
        need = sum(sizes)
        if need + temp > avail:
            raise ExecutionError(f"the inputs of @{fn.name} take {_gib(need)}, more than the "
                                 f"{_gib(avail)} this machine has available; bind smaller "
                                 "dimensions (distir import --dim) or a smaller batch", fn.loc)
    rng = np.random.default_rng(seed)
    roles = state_roles(fn)
    out = []
    for i, p in enumerate(fn.params):
        if p.name in fn.initializers:
            continue
        t = p.type
        if not isinstance(t, TensorType):
            raise ExecutionError(f"parameter %{p.name} of @{fn.name} needs a tensor type to "
                                 "make a random input; pass inputs instead", p.loc)
        role = roles.get(i)
        if role == "count":
            out.append(np.ones(t.shape, t.dtype.np))
        elif t.dtype.is_float:
            x = rng.standard_normal(t.shape)
            out.append((x * x if role == "square" else x).astype(t.dtype.np))
        elif t.dtype is DType.Bool:
            out.append(rng.integers(0, 2, t.shape).astype(bool))
        else:
            out.append(rng.integers(0, 8, t.shape).astype(t.dtype.np))
    return out
