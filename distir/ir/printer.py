"""The printer: the exact inverse of the parser.

``dumps(parse(dumps(m))) == dumps(m)``. Printed names are unique within a function and
deterministic: a value keeps its name hint when that is free, otherwise it gets a suffix
(``%h.1``); unnamed values get numbers.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping

import numpy as np

from distir._util import no_gc
from distir.ir.core import Function, Module, Op, Value
from distir.ir.types import DenseAttr, DType, Type

__all__ = ["dumps", "format_function", "format_op", "format_attr", "Namer", "quote_name"]

_PLAIN = re.compile(r"[A-Za-z0-9_.$-]+\Z")


def quote_name(name: str) -> str:
    """The name as written after ``%`` or ``@``: plain when possible, else quoted."""
    if _PLAIN.match(name):
        return name
    return json.dumps(name, ensure_ascii=False)


class Namer:
    """Assigns each value of a function a unique printed name, in definition order."""

    __slots__ = ("names", "used", "counter")

    def __init__(self) -> None:
        self.names: dict[int, str] = {}
        self.used: set[str] = set()
        self.counter = 0

    def define(self, v: Value) -> str:
        hint = v.name
        if hint is None or hint == "_" or hint in self.used or not hint:
            if hint is None or hint == "_" or not hint:
                while str(self.counter) in self.used:
                    self.counter += 1
                name = str(self.counter)
                self.counter += 1
            else:
                k = 1
                while f"{hint}.{k}" in self.used:
                    k += 1
                name = f"{hint}.{k}"
        else:
            name = hint
        self.used.add(name)
        text = "%" + quote_name(name)
        self.names[id(v)] = text
        return text

    def ref(self, v: Value | None) -> str:
        if v is None:
            return "_"
        s = self.names.get(id(v))
        if s is None:  # not defined in this function: print its hint, the verifier reports it
            return "%" + quote_name(v.name or "?")
        return s


def _float_str(x: float) -> str:
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    s = repr(float(x))
    return s


def _scalar_str(x: object, dtype: DType) -> str:
    if dtype is DType.Bool:
        return "true" if bool(x) else "false"
    if not dtype.is_float:
        return str(int(x))  # type: ignore[call-overload]
    if dtype in (DType.Float32, DType.Float16):
        s = str(x)  # numpy's shortest repr that round-trips in this precision
        if s in ("inf", "-inf", "nan"):
            return s
        if "." not in s and "e" not in s:
            s += ".0"
        return s
    return _float_str(float(x))  # type: ignore[arg-type]


def _dense_str(d: DenseAttr) -> str:
    arr = d.array
    dt = d.dtype

    def rec(a: np.ndarray) -> str:
        if a.ndim == 1:
            return "[" + ", ".join(_scalar_str(x, dt) for x in a) + "]"
        return "[" + ", ".join(rec(x) for x in a) + "]"

    if arr.ndim >= 1 and all(s > 0 for s in arr.shape):
        return f"dense<{dt.value}>{rec(arr)}"
    flat = arr.reshape(-1)
    body = "[" + ", ".join(_scalar_str(x, dt) for x in flat) + "]"
    shape = "(" + ", ".join(str(s) for s in arr.shape) + ("," if arr.ndim == 1 else "") + ")"
    return f"dense<{dt.value}, {shape}>{body}"


def format_attr(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return _float_str(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, DType):
        return v.value
    if isinstance(v, tuple | list):
        return "[" + ", ".join(format_attr(x) for x in v) + "]"
    if isinstance(v, DenseAttr):
        return _dense_str(v)
    raise TypeError(f"cannot print attribute value {v!r}")


BRIEF_DENSE = 16
"""With ``brief``, a constant of more elements prints as its type and ``[...]`` (error
messages: an export's index table may hold thousands)."""


class _Printer:
    def __init__(self, types: Mapping[Value, Type] | None = None, brief: bool = False,
                 ) -> None:
        self.type_str: dict[Type, str] = {}
        self.attr_str: dict[tuple, str] = {}
        self.types = types
        self.brief = brief

    def ty(self, t: Type) -> str:
        s = self.type_str.get(t)
        if s is None:
            s = self.type_str[t] = str(t)
        return s

    def attrs(self, op: Op) -> str:
        key = op.attrs_key
        try:
            s = self.attr_str.get(key)
        except TypeError:  # an unhashable value slipped in: print without caching
            s = None
            key = None  # type: ignore[assignment]
        if s is None:
            s = ", ".join(f"{k}={self._attr(v)}" for k, v in op.attrs.items())
            if key is not None:
                self.attr_str[key] = s
        return s

    def _attr(self, v: object) -> str:
        if self.brief and isinstance(v, DenseAttr) and v.numel > BRIEF_DENSE:
            shape = ", ".join(str(n) for n in v.shape) + ("," if len(v.shape) == 1 else "")
            return f"dense<{v.dtype.value}, ({shape})>[...]"
        return format_attr(v)

    def value_decl(self, namer: Namer, v: Value) -> str:
        name = namer.define(v)
        t = v.type
        if t is None and self.types is not None:
            t = self.types.get(v)
        return f"{name}: {self.ty(t)}" if t is not None else name

    def op(self, namer: Namer, op: Op) -> str:
        args = ", ".join([namer.ref(v) for v in op.inputs])
        if op.callee is not None:
            rhs = f"call @{quote_name(op.callee.name)}({args})"
        else:
            a = self.attrs(op) if op.attrs else ""
            if a:
                args = f"{args}, {a}" if args else a
            rhs = f"{op.op_type}({args})"
        outs = []
        for v in op.outputs:
            if v.name == "_":  # discarded, but its declared type is kept
                outs.append("_" if v.type is None else f"_: {self.ty(v.type)}")
            else:
                outs.append(self.value_decl(namer, v))
        return f"{', '.join(outs) or '()'} = {rhs}"

    def function(self, fn: Function) -> str:
        namer = Namer()
        decls = [self.value_decl(namer, p) for p in fn.params]
        head = f"func @{quote_name(fn.name)}("
        params = ", ".join(decls)
        if len(head) + len(params) > 90 and len(decls) > 1:
            params = (",\n" + " " * len(head)).join(decls)  # one parameter per line
        head = f"{head}{params})"
        if fn.return_types is not None:
            head += " -> (" + ", ".join(self.ty(t) for t in fn.return_types) + ")"
        lines = [head + " {"]
        line = self.op
        for op in fn.ops:
            lines.append("  " + line(namer, op))
        rets = ", ".join(namer.ref(v) for v in fn.returns)
        lines.append(f"  return {rets}" if rets else "  return")
        lines.append("}")
        return "\n".join(lines)


def format_function(fn: Function, types: Mapping[Value, Type] | None = None) -> str:
    """The text of one function; ``types`` annotates results that have no declared type."""
    return _Printer(types).function(fn)


def format_op(op: Op) -> str:
    """One op in IR syntax, using name hints (for error messages)."""
    namer = Namer()
    for v in op.inputs:
        if v is not None:
            namer.names[id(v)] = "%" + quote_name(v.name or "?")
    return _Printer().op(namer, op)


def dumps(obj: Module | Function, types: Mapping[Value, Type] | None = None) -> str:
    """The canonical text of a module (or of one function and everything it calls)."""
    m = obj if isinstance(obj, Module) else Module.of(obj)
    p = _Printer(types)
    with no_gc():
        return "\n\n".join(p.function(f) for f in m) + "\n"
