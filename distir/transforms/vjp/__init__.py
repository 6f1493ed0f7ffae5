"""VJP rules: how the gradient flows backward through each op, one entry per op name.

``VJP_RULES`` is one more ``RuleTable`` (``distir.analysis.rules``), filled by
``@VJP_RULES.register(...)`` in one module per op family (``elementwise``, ``shape``,
``nn``). They live here rather than beside each op's type and numpy rules so that
the autodiff pass owns them in one place; ``load_vjp_rules()`` imports them once.

A rule is called as ``rule(cx, douts, need)``:

- ``cx`` is the ``VJPContext`` of the forward op being differentiated: its attributes
  (schema defaults filled in), the static types and known values of its inputs and results,
  and the builder through which the rule emits ops (``cx.emit``);
- ``douts[j]`` is the cotangent (a value of the new function, typed like result ``j``) of
  result ``j``, or ``None`` when nothing downstream depends on it;
- ``need[i]`` says whether input ``i`` needs a gradient. A rule emits ops only for the
  inputs that need one (integer indices, shapes and constants never do), so paths that are
  not differentiated cost nothing.

It returns one entry per input: the cotangent value (of the input's shape and dtype) or
``None`` (no gradient, or not needed). Rules read only types, attributes and known values,
never value names.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from distir.analysis.rules import RuleTable
from distir.analysis.values import Concrete, type_of
from distir.errors import TransformError
from distir.ir.builder import FunctionBuilder
from distir.ir.core import Op, Value
from distir.ir.types import DType, ScalarType, TensorType

__all__ = ["VJP_RULES", "VJPContext", "VJPRule", "load_vjp_rules"]

VJP_RULES = RuleTable("vjp")
"""The VJP rules, keyed by op name: ``VJP_RULES.register(*ops)``."""

VJPRule = Callable[["VJPContext", tuple, tuple], tuple]

_MODULES = ["distir.transforms.vjp.elementwise", "distir.transforms.vjp.shape",
            "distir.transforms.vjp.nn"]
_loaded: list[bool] = []


def load_vjp_rules() -> None:
    """Import every VJP rule module once."""
    if _loaded:
        return
    for name in _MODULES:
        importlib.import_module(name)
    _loaded.append(True)


def _tensor_type(a: Any) -> TensorType | None:
    t = type_of(a) if a is not None else None
    if isinstance(t, ScalarType):
        return TensorType(t.dtype, (), t.device)
    return t if isinstance(t, TensorType) else None


class VJPContext:
    """One forward op, seen by its VJP rule; ``emit`` appends ops to the backward pass.

    ``env`` maps forward values to their abstract values (type propagation, run once);
    ``new`` maps forward values to the values that stand for them in the new function.
    ``consts`` caches emitted constants by ``(bytes, dtype, shape, device)`` for this pass.
    """

    def __init__(self, b: FunctionBuilder, env: dict[Value, Any], new: dict[Value, Value],
                 consts: dict[tuple, Value]) -> None:
        self.b = b
        self.env = env
        self.new = new
        self._consts = consts
        self.op: Op = Op("Identity")
        self.attrs: dict[str, Any] = {}
        self.ones: set[Value] = set()
        """Cotangents known to be all ones (the loss's seed): ``times`` skips them."""

    def at(self, op: Op, attrs: dict[str, Any]) -> VJPContext:
        self.op = op
        self.attrs = attrs
        return self

    # The forward op's operands -------------------------------------------------------
    @property
    def n_in(self) -> int:
        return len(self.op.inputs)

    def x(self, i: int) -> Value:
        """Input ``i`` as a value of the new function."""
        v = self.op.inputs[i]
        if v is None:
            raise TransformError(f"{self.op.op_type}: input {i} is omitted")
        return self.new[v]

    def y(self, j: int = 0) -> Value:
        """Result ``j`` as a value of the new function."""
        return self.new[self.op.outputs[j]]

    def has(self, i: int) -> bool:
        return i < len(self.op.inputs) and self.op.inputs[i] is not None

    def tx(self, i: int) -> TensorType:
        """The static type of input ``i``."""
        v = self.op.inputs[i]
        t = _tensor_type(self.env.get(v)) if v is not None else None
        if t is None:
            raise TransformError(f"{self.op.op_type}: input {i} has no tensor type")
        return t

    def ty(self, j: int = 0) -> TensorType:
        t = _tensor_type(self.env.get(self.op.outputs[j]))
        if t is None:
            raise TransformError(f"{self.op.op_type}: result {j} has no tensor type")
        return t

    def known(self, i: int) -> np.ndarray | None:
        """Input ``i``'s value when type propagation knows it (shapes, axes), else ``None``."""
        v = self.op.inputs[i] if i < len(self.op.inputs) else None
        if v is None:
            return None
        a = self.env.get(v)
        return a.value if isinstance(a, Concrete) else None

    def known_ints(self, i: int, what: str) -> list[int]:
        v = self.known(i)
        if v is None:
            raise TransformError(f"{self.op.op_type}: the {what} (input {i}) must be known "
                                 "before the step to differentiate it; make it a Constant")
        return [int(a) for a in np.asarray(v).reshape(-1)]

    def fail(self, what: str) -> TransformError:
        return TransformError(f"cannot differentiate {self.op.op_type}: {what}")

    # Emitting ops ---------------------------------------------------------------------
    def emit(self, op_type: str, *ins: Value | None, n: int | None = None, **attrs: Any) -> Any:
        """Append one op; its result (or results)."""
        return self.b.op(op_type, *ins, num_results=n, **attrs)

    @property
    def device(self) -> int:
        t = self.ty(0) if self.op.outputs else self.tx(0)
        return t.device

    def const(self, value: Any, dtype: DType | np.dtype | None = None) -> Value:
        """A ``Constant`` on the op's device (emitted once per distinct value)."""
        np_dt = dtype.np if isinstance(dtype, DType) else dtype
        arr = np.asarray(value, dtype=np_dt)
        key = (arr.tobytes(), arr.dtype.str, arr.shape, self.device)
        v = self._consts.get(key)
        if v is None:
            v = self._consts[key] = self.b.op("Constant", value=arr, device=self.device)
        return v

    def scalar(self, value: float, like: TensorType) -> Value:
        """A 0-d constant of ``like``'s dtype."""
        return self.const(np.asarray(value, dtype=like.dtype.np))

    def ints(self, values: Sequence[int]) -> Value:
        return self.const(np.asarray(list(values), dtype=np.int64))

    def zeros(self, t: TensorType) -> Value:
        """A zero tensor of type ``t`` (a scalar zero expanded)."""
        z = self.scalar(0.0, t)
        return z if t.shape == () else self.emit("Expand", z, self.ints(t.shape))

    def reshape(self, v: Value, shape: tuple[int, ...]) -> Value:
        return self.emit("Reshape", v, self.ints(shape))

    def reduce_sum(self, v: Value, axes: Sequence[int], keepdims: bool) -> Value:
        if not axes:
            return v
        return self.emit("ReduceSum", v, self.ints(axes), keepdims=int(keepdims))

    def sum_to(self, g: Value, g_shape: tuple[int, ...], shape: tuple[int, ...]) -> Value:
        """``g`` (of ``g_shape``) summed over the axes along which a tensor of ``shape``
        was broadcast to ``g_shape`` (numpy rules), so that it has ``shape``."""
        if g_shape == shape:
            return g
        lead = len(g_shape) - len(shape)
        axes = list(range(lead)) + [lead + i for i, d in enumerate(shape)
                                    if d == 1 and g_shape[lead + i] != 1]
        r = self.reduce_sum(g, axes, keepdims=True)
        kept = tuple(1 if i in axes else d for i, d in enumerate(g_shape))
        return r if kept == shape else self.reshape(r, shape)

    def mul(self, a: Value, b: Value) -> Value:
        return self.emit("Mul", a, b)

    def times(self, g: Value, d: Value) -> Value:
        """``g * d`` for a scalar cotangent ``d`` (``g`` itself when ``d`` is the seed)."""
        return g if d in self.ones else self.emit("Mul", g, d)
