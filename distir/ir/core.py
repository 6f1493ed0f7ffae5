"""Values, ops, functions and modules: the DistIR program representation.

Invariants:
- ``Value`` and ``Op`` compare by identity; types and attributes compare by value.
- ``Function`` and ``Module`` compare by structure (``==``): the same ops with the same
  types, attributes and dataflow, whatever the value names (names are hints), so
  ``parse(dumps(m)) == m``. Initializer values (weights) are data bound to the program, not
  part of it: the text does not hold them, and ``==`` does not compare them. Inside a
  function, values stay identity-compared; analyses key their caches by identity
  (``id``), never by a function's structure.
- A ``Function`` is a straight line of ops ending in its ``returns``; every value is defined
  once (as a parameter or an op result) before its uses. ``verify`` checks this; constructors
  check only local facts.
- Names are hints: the printer makes printed names unique, so a pass never has to invent
  globally unique names.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from distir.errors import Loc
from distir.ir.types import DenseAttr, DType, Type

__all__ = ["Value", "Op", "Function", "Module", "AttrValue", "CALL"]

AttrValue = int | float | bool | str | DType | DenseAttr | tuple
"""Attribute values are immutable: lists are tuples, tensors are ``DenseAttr``."""

CALL = "call"
"""The op type of a call; its callee is ``Op.callee``."""

_EMPTY_ATTRS: dict[str, Any] = {}


class Value:
    """An SSA value. ``name`` is a hint; ``type`` is the declared type, if any."""

    __slots__ = ("name", "type", "loc")

    def __init__(self, name: str | None = None, type: Type | None = None,
                 loc: Loc | None = None) -> None:
        self.name = name
        self.type = type
        self.loc = loc

    def __repr__(self) -> str:
        return f"%{self.name}" if self.name is not None else f"<Value {id(self):x}>"


class Op:
    """One op application: ``outputs = op_type(inputs, attrs)``.

    ``inputs`` may contain ``None`` for an omitted optional input (written ``_``). For a call,
    ``op_type`` is ``"call"`` and ``callee`` is the called ``Function``.
    """

    __slots__ = ("op_type", "inputs", "attrs", "outputs", "callee", "loc", "_key")

    def __init__(self, op_type: str, inputs: Sequence[Value | None] = (),
                 attrs: dict[str, AttrValue] | None = None,
                 outputs: Sequence[Value] = (), callee: Function | None = None,
                 loc: Loc | None = None) -> None:
        self.op_type = op_type
        self.inputs: tuple[Value | None, ...] = tuple(inputs)
        self.attrs: dict[str, AttrValue] = attrs if attrs else _EMPTY_ATTRS
        self.outputs: tuple[Value, ...] = tuple(outputs)
        self.callee = callee
        self.loc = loc
        self._key: tuple | None = None

    @property
    def attrs_key(self) -> tuple:
        """A hashable form of the attributes, computed once."""
        k = self._key
        if k is None:
            k = self._key = tuple(sorted(self.attrs.items())) if self.attrs else ()
        return k

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    @property
    def is_call(self) -> bool:
        return self.op_type == CALL

    def __repr__(self) -> str:
        outs = ", ".join(repr(v) for v in self.outputs)
        ins = ", ".join("_" if v is None else repr(v) for v in self.inputs)
        target = f"call @{self.callee.name}" if self.callee is not None else self.op_type
        return f"<Op {outs} = {target}({ins})>"


class Function:
    """A straight-line SSA function.

    ``return_types``, when given, is the declared ``-> (types)`` list.
    """

    __slots__ = ("name", "params", "ops", "returns", "return_types", "loc", "end_loc",
                 "initializers", "__weakref__")

    def __init__(self, name: str, params: Sequence[Value], ops: Sequence[Op],
                 returns: Sequence[Value], return_types: Sequence[Type] | None = None,
                 loc: Loc | None = None, end_loc: Loc | None = None) -> None:
        self.name = name
        self.params: tuple[Value, ...] = tuple(params)
        self.ops: list[Op] = list(ops)
        self.returns: tuple[Value, ...] = tuple(returns)
        self.return_types: tuple[Type, ...] | None = (
            None if return_types is None else tuple(return_types))
        self.loc = loc
        self.end_loc = end_loc
        self.initializers: dict[str, Any] = {}
        """Values bound to parameters by name (imported weights); callers omit them."""

    @property
    def is_typed(self) -> bool:
        """Whether every parameter has a declared type."""
        return all(p.type is not None for p in self.params)

    @property
    def param_types(self) -> tuple[Type | None, ...]:
        return tuple(p.type for p in self.params)

    def callees(self) -> Iterator[Function]:
        """The functions this one calls directly, each once, in order of first call."""
        seen: dict[int, Function] = {}
        for op in self.ops:
            c = op.callee
            if c is not None and id(c) not in seen:
                seen[id(c)] = c
                yield c

    def reachable(self) -> Iterator[Function]:
        """The functions this one calls directly or through others, each once (a stage
        function calling a layer function: both)."""
        seen: set[int] = {id(self)}
        todo = list(self.callees())
        while todo:
            f = todo.pop(0)
            if id(f) in seen:
                continue
            seen.add(id(f))
            yield f
            todo.extend(f.callees())

    def num_ops(self, *, inline_calls: bool = False) -> int:
        """The number of ops; with ``inline_calls``, a call counts as its callee's ops."""
        if not inline_calls:
            return len(self.ops)
        memo: dict[int, int] = {}

        def count(f: Function) -> int:
            n = memo.get(id(f))
            if n is None:
                n = sum(count(op.callee) if op.callee is not None else 1 for op in f.ops)
                memo[id(f)] = n
            return n

        return count(self)

    def __repr__(self) -> str:
        return f"<Function @{self.name}: {len(self.params)} params, {len(self.ops)} ops>"

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Function):
            return NotImplemented
        return _same_function(self, other, set())

    def __hash__(self) -> int:
        # Consistent with ``__eq__`` and cheap; a function is mutable while it is built, so
        # only what no pass changes after construction takes part.
        return hash((self.name, len(self.params)))


class Module:
    """An ordered collection of functions.

    ``initializers`` maps a parameter name of the entry function to a numpy array (imported
    ONNX weights): the executor supplies them, so a caller passes only the other inputs.
    """

    __slots__ = ("functions", "filename")

    def __init__(self, functions: Sequence[Function] = (), filename: str = "<module>",
                 initializers: dict[str, Any] | None = None) -> None:
        self.functions: dict[str, Function] = {}
        for f in functions:
            self.add(f)
        self.filename = filename
        if initializers:
            self.initializers = dict(initializers)

    @property
    def initializers(self) -> dict[str, Any]:
        """The entry function's values bound to parameters by name (imported weights)."""
        return self.entry.initializers if self.functions else {}

    @initializers.setter
    def initializers(self, values: dict[str, Any]) -> None:
        self.entry.initializers = dict(values)

    def add(self, fn: Function) -> Function:
        self.functions[fn.name] = fn
        return fn

    @property
    def entry(self) -> Function:
        """``@main`` when the module has one, otherwise the last function."""
        if "main" in self.functions:
            return self.functions["main"]
        if not self.functions:
            from distir.errors import VerifyError

            raise VerifyError(f"{self.filename}: the module has no functions")
        return next(reversed(self.functions.values()))

    def __getitem__(self, name: str) -> Function:
        return self.functions[name]

    def __iter__(self) -> Iterator[Function]:
        return iter(self.functions.values())

    def __len__(self) -> int:
        return len(self.functions)

    def __repr__(self) -> str:
        return f"<Module {self.filename}: {', '.join('@' + n for n in self.functions)}>"

    def __eq__(self, other: object) -> bool:
        """Structural: the same functions, in the same order, each equal (``filename`` is
        where the module came from, not part of it)."""
        if self is other:
            return True
        if not isinstance(other, Module):
            return NotImplemented
        if list(self.functions) != list(other.functions):
            return False
        seen: set[tuple[int, int]] = set()
        return all(_same_function(f, other.functions[n], seen)
                   for n, f in self.functions.items())

    __hash__ = None  # type: ignore[assignment]  # mutable, like a list

    @staticmethod
    def of(fn: Function) -> Module:
        """The module holding ``fn`` and, transitively, every function it calls."""
        order: list[Function] = []
        seen: set[int] = set()

        def visit(f: Function) -> None:
            if id(f) in seen:
                return
            seen.add(id(f))
            for c in f.callees():
                visit(c)
            order.append(f)

        visit(fn)
        names: set[str] = set()
        for f in order:  # names are hints: keep them unique within the module
            base, k = f.name, 1
            while f.name in names:
                f.name = f"{base}.{k}"
                k += 1
            names.add(f.name)
        return Module(order)


def _same_function(a: Function, b: Function, seen: set[tuple[int, int]]) -> bool:
    """Whether ``a`` and ``b`` are the same program up to value names: one walk that maps
    each value of ``a`` to the value of ``b`` defined in the same place. ``seen`` holds
    the pairs of callees already found equal (or being compared: calls cannot recurse)."""
    pair = (id(a), id(b))
    if pair in seen:
        return True
    if (a.name != b.name or len(a.params) != len(b.params) or len(a.ops) != len(b.ops)
            or len(a.returns) != len(b.returns) or a.return_types != b.return_types):
        return False
    if any(p.type != q.type for p, q in zip(a.params, b.params)):
        return False
    seen.add(pair)
    to_b: dict[int, Value] = {id(p): q for p, q in zip(a.params, b.params)}
    for x, y in zip(a.ops, b.ops):
        if (x.op_type != y.op_type or len(x.inputs) != len(y.inputs)
                or len(x.outputs) != len(y.outputs) or x.attrs_key != y.attrs_key):
            return False
        if x.callee is not None or y.callee is not None:
            if x.callee is None or y.callee is None or not _same_function(
                    x.callee, y.callee, seen):
                return False
        for u, v in zip(x.inputs, y.inputs):
            if u is None or v is None:
                if u is not v:
                    return False
            elif to_b.get(id(u)) is not v:
                return False
        for u, v in zip(x.outputs, y.outputs):
            if u.type != v.type:
                return False
            to_b[id(u)] = v
    return all(to_b.get(id(u)) is v for u, v in zip(a.returns, b.returns))
