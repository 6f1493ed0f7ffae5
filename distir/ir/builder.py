"""A builder for functions, used by model builders, importers and transforms."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from distir.errors import VerifyError
from distir.ir.core import CALL, AttrValue, Function, Op, Value
from distir.ir.schemas import SCHEMAS
from distir.ir.types import DenseAttr, Type

__all__ = ["FunctionBuilder", "normalize_attr"]


def normalize_attr(v: Any) -> AttrValue:
    """Make an attribute value immutable: lists become tuples, arrays ``DenseAttr``."""
    if isinstance(v, bool | int | float | str | DenseAttr):
        return v
    if isinstance(v, list | tuple):
        return tuple(normalize_attr(x) for x in v)
    if isinstance(v, np.ndarray):
        return DenseAttr.from_array(v)
    if isinstance(v, np.generic):
        return v.item()  # type: ignore[no-any-return]
    return v  # DType and other immutable values


class FunctionBuilder:
    """Builds a function one op at a time; ``ret`` finishes it.

    Result counts come from the op's schema (or ``num_results`` for variadic ones); names
    are hints, made unique when printed.

    >>> from distir.ir import DType, FunctionBuilder, TensorType, dumps
    >>> b = FunctionBuilder("dense")
    >>> x = b.param("x", TensorType(DType.Float32, (16, 64), 0))
    >>> w = b.param("w", TensorType(DType.Float32, (64, 32), 0))
    >>> h = b.op("MatMul", x, w, name="h")
    >>> a = b.op("Relu", h, name="a")
    >>> q, r = b.op("Split", a, axis=1, num_outputs=2, name=("q", "r"))
    >>> print(dumps(b.ret(q, r)), end="")
    func @dense(%x: Tensor[Float32, (16, 64), 0], %w: Tensor[Float32, (64, 32), 0]) {
      %h = MatMul(%x, %w)
      %a = Relu(%h)
      %q, %r = Split(%a, axis=1, num_outputs=2)
      return %q, %r
    }
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.params: list[Value] = []
        self.ops: list[Op] = []

    def param(self, name: str | None = None, type: Type | None = None) -> Value:
        v = Value(name, type)
        self.params.append(v)
        return v

    @staticmethod
    def _names(name: str | Sequence[str] | None, n: int) -> list[str | None]:
        if name is None:
            return [None] * n
        if isinstance(name, str):
            return [name] if n == 1 else [f"{name}{i}" for i in range(n)]
        if len(name) != n:
            raise ValueError(f"{len(name)} names given for {n} results")
        return list(name)

    def op(self, op_type: str, *inputs: Value | None, name: str | Sequence[str] | None = None,
           num_results: int | None = None, **attrs: Any) -> Any:
        """Append ``op_type(inputs, attrs)``; return its result, or a tuple of results."""
        attrs_n = {k: normalize_attr(v) for k, v in attrs.items()}
        if num_results is None:
            schema = SCHEMAS.get(op_type)
            if schema is None:
                raise VerifyError(f"unknown op '{op_type}'")
            lo, hi = schema.expected_outputs(len(inputs), attrs_n)
            if hi is None and lo != hi:
                raise VerifyError(f"{op_type} has a variable number of results: pass "
                                  "num_results=")
            num_results = lo
        outs = [Value(n) for n in self._names(name, num_results)]
        self.ops.append(Op(op_type, inputs, attrs_n or None, outs))
        return outs[0] if num_results == 1 else tuple(outs)

    def call(self, fn: Function, *args: Value, name: str | Sequence[str] | None = None) -> Any:
        """Append a call of ``fn``; return its result, or a tuple of results."""
        n = len(fn.returns)
        outs = [Value(x) for x in self._names(name, n)]
        self.ops.append(Op(CALL, args, None, outs, callee=fn))
        return outs[0] if n == 1 else tuple(outs)

    def ret(self, *values: Value, return_types: Sequence[Type] | None = None) -> Function:
        return Function(self.name, self.params, self.ops, values, return_types)
