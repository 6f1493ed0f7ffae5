"""The sequential function as the transforms see it: ops indexed by position, the type of
every value, def-use lists and liveness, computed once.

Liveness ignores the *shape operands* that a transform replaces by local constants (the
target shape of ``Reshape``/``Expand``/``ConstantOfShape``, the sizes of ``Split``) and the
operand of ``Shape``/``Size`` (whose local value is a constant too), so the run-time shape
chains of an exported graph drop out of the distributed program.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from distir.errors import TransformError
from distir.ir.core import Function, Op, Value
from distir.ir.inline import inline_calls
from distir.ir.printer import Namer, _Printer
from distir.ir.schemas import COMM_OPS
from distir.ir.types import DenseAttr, TensorType

__all__ = ["Program", "SHAPE_OPERANDS", "KNOWN_LIMIT", "inline_calls", "in_own_blocks"]

SHAPE_OPERANDS = frozenset({("Reshape", 1), ("Expand", 1), ("Split", 1),
                            ("ConstantOfShape", 0)})
"""``(op, input)`` pairs whose value is a shape that transforms recompute locally."""

SHAPE_OPS = frozenset({"Shape", "Size"})

KNOWN_LIMIT = 1 << 22
"""The most elements ``Program.known`` computes for one value, summed over the results of
the ops it evaluates (4,194,304: 32 MiB of ``Int64``); a value that needs more stays
unknown."""


class Program:
    """A typed, call-free sequential function with def-use indexes."""

    def __init__(self, fn: Function) -> None:
        from distir.analysis import type_env
        from distir.analysis.rules import full_attrs

        if any(op.callee is not None for op in fn.ops):
            fn = inline_calls(fn)
        for op in fn.ops:
            if op.op_type in COMM_OPS:
                raise TransformError(f"@{fn.name} already communicates ({op.op_type}): "
                                     "distribute a sequential function")
        self.fn = fn
        self.ops: list[Op] = fn.ops
        self.env: dict[Value, Any] = type_env(fn)
        self.param_set = frozenset(fn.params)
        self.returned = frozenset(fn.returns)
        self._attrs: dict[tuple, dict[str, Any]] = {}
        self._full_attrs = full_attrs
        self._namer: _Named | None = None
        self._known: dict[Value, np.ndarray | None] = {}
        self.derived: dict[Any, Any] = {}
        """Memos of passes over this program, each under its pass's key (the spmd op rules
        per mesh shape): kept as long as the program, shared by every configuration."""
        self.producer: dict[Value, int] = {}
        for i, op in enumerate(self.ops):
            for v in op.outputs:
                self.producer[v] = i
        self._liveness()

    def live(self, unread: frozenset[tuple[int, int]] = frozenset(),
             ) -> tuple[list[bool], set[Value]]:
        """Per op, whether the results need it, and the values they read: backwards from
        the results, through every input but shape operands (``SHAPE_OPS``' inputs,
        ``SHAPE_OPERANDS``: known before running) and the ``(op index, input index)``
        reads in ``unread`` (reads a lowering serves otherwise)."""
        ops = self.ops
        live_vals: set[Value] = set(self.fn.returns)
        live = [False] * len(ops)
        for i in range(len(ops) - 1, -1, -1):
            op = ops[i]
            if not any(v in live_vals for v in op.outputs):
                continue
            live[i] = True
            t = op.op_type
            if t in SHAPE_OPS:
                continue
            for k, v in enumerate(op.inputs):
                if v is not None and (t, k) not in SHAPE_OPERANDS and \
                        (not unread or (i, k) not in unread):
                    live_vals.add(v)
        return live, live_vals

    def _liveness(self) -> None:
        ops = self.ops
        live, live_vals = self.live()
        self.live_ops: list[int] = [i for i in range(len(ops)) if live[i]]
        self.live_values = live_vals
        users: dict[Value, list[int]] = {}
        for i in self.live_ops:
            op = ops[i]
            if op.op_type in SHAPE_OPS:
                continue
            for k, v in enumerate(op.inputs):
                if v is not None and (op.op_type, k) not in SHAPE_OPERANDS:
                    lst = users.setdefault(v, [])
                    if not lst or lst[-1] != i:
                        lst.append(i)
        self.users = users

    def type(self, v: Value) -> Any:
        a = self.env[v]
        return getattr(a, "type", a)

    def shape(self, v: Value) -> tuple[int, ...]:
        t = self.type(v)
        return t.shape if isinstance(t, TensorType) else ()

    def const(self, v: Value | None) -> np.ndarray | None:
        """The known value of ``v`` (shape tensors, small constants), else ``None``."""
        if v is None:
            return None
        a = self.env.get(v)
        return getattr(a, "value", None)

    def constant(self, v: Value | None) -> np.ndarray | None:
        """``const``'s value of ``v``, else, for a ``Constant`` op's result too large for the
        type propagator to keep, the op's own value; else ``None``."""
        c = self.const(v)
        if c is not None or v is None:
            return c
        i = self.producer.get(v)
        op = None if i is None else self.ops[i]
        value = None if op is None or op.op_type != "Constant" or op.inputs else \
            op.attrs.get("value")
        return np.asarray(value.array) if isinstance(value, DenseAttr) else None

    def known(self, v: Value | None) -> np.ndarray | None:
        """The value of ``v`` where it is known before running: ``const``'s, else computed
        once (memoized) with the reference rules from known values (constants, shapes) where
        the ops making ``v`` read no parameter but known ones and their results hold at most
        ``KNOWN_LIMIT`` elements in all (the type propagator keeps values of at most
        ``CONCRETE_LIMIT`` elements: positions over a large batch are not kept); else
        ``None``."""
        if v is None:
            return None
        c = self.const(v)
        if c is not None:
            return np.asarray(c)
        if v not in self._known:
            self._known[v] = self._evaluate(v)
        return self._known[v]

    def _evaluate(self, v: Value) -> np.ndarray | None:
        """``v`` computed from the known values its ops read (``known``), or ``None``."""
        from distir.analysis.interpreter import NumpyInterpreter
        from distir.errors import DistIRError

        need: set[int] = set()
        stack, seen, total = [v], {v}, 0
        while stack:
            u = stack.pop()
            if self.const(u) is not None:
                continue
            i = self.producer.get(u)
            if i is None:  # a parameter: data
                return None
            if i in need:
                continue
            need.add(i)
            op = self.ops[i]
            for o in op.outputs:
                t = self.type(o)
                total += t.numel if isinstance(t, TensorType) else KNOWN_LIMIT + 1
            if total > KNOWN_LIMIT:
                return None
            for w in op.inputs:
                if w is not None and w not in seen:
                    seen.add(w)
                    stack.append(w)
        interp = NumpyInterpreter()
        env: dict[Value, Any] = {}
        for i in sorted(need):  # program order
            op = self.ops[i]
            args = tuple(None if w is None else env[w] if w in env else self.const(w)
                         for w in op.inputs)
            try:
                env.update(zip(op.outputs, interp.eval_op(op, args), strict=True))
            except DistIRError:  # no reference rule: not known
                return None
        t = self.type(v)
        return np.asarray(env[v], dtype=t.dtype.np).reshape(t.shape)

    def attrs(self, op: Op) -> dict[str, Any]:
        key = (op.op_type, op.attrs_key)
        a = self._attrs.get(key)
        if a is None:
            a = self._attrs[key] = self._full_attrs(op.op_type, op.attrs)
        return a

    def op_text(self, op: Op) -> str:
        """``op`` in IR syntax with the names ``distir.dumps`` gives its values (unnamed
        values, such as a gradient's, are numbered as in the printed function), for error
        messages (a large constant's value shown as ``[...]``)."""
        return _Printer(brief=True).op(self._names(), op)

    def value_text(self, v: Value) -> str:
        """``v`` as ``op_text`` names it (``%17`` for an unnamed value)."""
        return self._names().ref(v)

    def _names(self) -> _Named:
        namer = self._namer
        if namer is None:
            namer = self._namer = _Named()
            for v in self.fn.params:
                namer.define(v)
            for o in self.ops:
                for v in o.outputs:
                    if v.name != "_":  # printed as `_`, not numbered
                        namer.define(v)
            namer.done = True
        return namer

    def producer_op(self, v: Value) -> Op | None:
        i = self.producer.get(v)
        return None if i is None else self.ops[i]

    def derived_from(self, v: Value | None, hit: Callable[[Value, Op | None], bool],
                     limit: int = 256) -> bool:
        """Whether ``v``, or a value it is computed from (through any ops, up to ``limit``
        values), satisfies ``hit(value, its producing op or None)``."""
        seen: set[Value] = set()
        todo = [] if v is None else [v]
        while todo and len(seen) < limit:
            x = todo.pop()
            if x in seen:
                continue
            seen.add(x)
            op = self.producer_op(x)
            if hit(x, op):
                return True
            if op is not None:
                todo.extend(y for y in op.inputs if y is not None)
        return False

    def is_zeros(self, v: Value | None) -> bool:
        """Whether ``v`` is all zeros: a zero constant, ``ConstantOfShape`` of zero (or
        without a value), or one expanded."""
        c = self.const(v)
        if c is not None:
            return not np.any(c)
        op = self.producer_op(v) if v is not None else None
        if op is None:
            return False
        if op.op_type == "Expand":
            return self.is_zeros(op.inputs[0])
        if op.op_type == "ConstantOfShape":
            val = op.attrs.get("value")
            return val is None or not np.any(val.array)  # type: ignore[union-attr]
        return False


class _Named(Namer):
    """A namer that, once every value of the function is defined, prints each value with
    the name it got (an op's results included)."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        super().__init__()
        self.done = False

    def define(self, v: Value) -> str:
        if self.done and id(v) in self.names:
            return self.names[id(v)]
        return super().define(v)


def in_own_blocks(idx: np.ndarray, rows: int, n: int) -> bool:
    """Whether block ``j`` of ``idx``'s leading axis cut in ``n`` (non-negative row
    indices) reads only rows ``[j·L, (j+1)·L)`` of ``rows`` (``L = rows / n``): then a split
    of both in ``n`` keeps each block's indices in its own rows."""
    if n < 1 or rows % n or not idx.shape or idx.shape[0] % n:
        return False
    per = rows // n
    block = idx.reshape(n, -1)
    first = np.arange(n, dtype=np.int64)[:, None] * per
    return bool(((block >= first) & (block < first + per)).all())
