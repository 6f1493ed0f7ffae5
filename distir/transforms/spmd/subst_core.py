"""The machinery of substitutions: a typed view of a function for matchers, an emitter for
replacement ops, and one rewrite that splices them in and returns a new verified function.

A substitution's matcher reads op types, attributes, wiring and shapes only (never value
names), and returns ``Site``s: the positions of the ops it would replace. Its builder emits
replacement ops and maps every result of a replaced op that is still used to a new value.
``rewrite`` then copies the function with fresh values and ops, drops the replaced ops and
the producers left without users, restores a definition-before-use order, verifies and
type-checks the result. Parameters and results are those of the original: a rewritten step
is a drop-in replacement (concatenated weights are built inside the program).
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from distir.errors import TransformError
from distir.ir.builder import normalize_attr
from distir.ir.core import Function, Op, Value
from distir.ir.types import DType, TensorType

__all__ = ["Graph", "Site", "Emitter", "Substitution", "rewrite", "rewrite_tracked",
           "structural_hash"]


class Graph:
    """``fn`` with its ops' positions, every value's type, producer and readers."""

    def __init__(self, fn: Function) -> None:
        from distir.analysis import type_env
        from distir.ir.inline import inline_calls

        if any(op.callee is not None for op in fn.ops):
            fn = inline_calls(fn)
        self.fn = fn
        self.ops = fn.ops
        self.env = type_env(fn)
        self.returned = frozenset(fn.returns)
        self.producer: dict[Value, int] = {}
        self.readers: dict[Value, list[int]] = {}
        for i, op in enumerate(fn.ops):
            for v in op.outputs:
                self.producer[v] = i
            for u in op.inputs:
                if u is not None:
                    lst = self.readers.setdefault(u, [])
                    if not lst or lst[-1] != i:
                        lst.append(i)

    def type(self, v: Value | None) -> TensorType | None:
        if v is None:
            return None
        a = self.env.get(v)
        t = getattr(a, "type", a)
        return t if isinstance(t, TensorType) else None

    def shape(self, v: Value | None) -> tuple[int, ...] | None:
        t = self.type(v)
        return None if t is None else t.shape

    def dtype(self, v: Value | None) -> DType | None:
        t = self.type(v)
        return None if t is None else t.dtype

    def made_by(self, v: Value | None, *op_types: str) -> Op | None:
        """The op producing ``v`` if it is one of ``op_types``."""
        if v is None:
            return None
        i = self.producer.get(v)
        if i is None or self.ops[i].op_type not in op_types:
            return None
        return self.ops[i]

    def sole_reader(self, v: Value, i: int) -> bool:
        """Whether op ``i`` is the only reader of ``v`` and ``v`` is not returned."""
        return v not in self.returned and self.readers.get(v, []) == [i]

    def index(self, op: Op) -> int:
        return self.producer[op.outputs[0]]

    def const(self, v: Value | None) -> Any:
        """The known value of ``v`` (a numpy array) or ``None``."""
        if v is None:
            return None
        return getattr(self.env.get(v), "value", None)


@dataclass(frozen=True)
class Site:
    """Where a substitution applies: ``ops`` (positions in the function, the ops replaced)
    and ``data`` (what the builder needs beyond them, rule-specific)."""

    ops: tuple[int, ...]
    data: tuple = ()

    def describe(self, g: Graph) -> str:
        parts = []
        for i in self.ops:
            op = g.ops[i]
            shapes = ",".join("x".join(map(str, g.shape(v) or ())) for v in op.inputs
                              if v is not None and g.shape(v) is not None)
            parts.append(f"{op.op_type}#{i}({shapes})")
        return " ".join(parts)


class Emitter:
    """Collects replacement ops; ``op`` returns the new result(s) like ``FunctionBuilder``."""

    def __init__(self, device: int) -> None:
        self.ops: list[Op] = []
        self.device = device

    def op(self, op_type: str, *inputs: Value | None, n: int = 1, hint: str = "s",
           **attrs: Any) -> Any:
        outs = [Value(hint if n == 1 else f"{hint}{k}") for k in range(n)]
        clean = {k: normalize_attr(v) for k, v in attrs.items()}
        self.ops.append(Op(op_type, inputs, clean or None, outs))
        return outs[0] if n == 1 else tuple(outs)

    def like(self, op: Op, inputs: Sequence[Value | None], hint: str) -> Value:
        """A one-result op of ``op``'s type and attributes on other ``inputs``."""
        out = Value(hint)
        self.ops.append(Op(op.op_type, inputs, dict(op.attrs) if op.attrs else None, [out]))
        return out

    def split(self, x: Value, sizes: Sequence[int], axis: int, hint: str) -> tuple[Value, ...]:
        """``x`` cut along ``axis`` into pieces of ``sizes``."""
        import numpy as np

        if len(set(sizes)) == 1:
            outs = self.op("Split", x, n=len(sizes), hint=hint, axis=axis,
                           num_outputs=len(sizes))
        else:
            s = self.op("Constant", hint=f"{hint}.sizes", device=self.device,
                        value=np.asarray(sizes, np.int64))
            outs = self.op("Split", x, s, n=len(sizes), hint=hint, axis=axis)
        return outs if isinstance(outs, tuple) else (outs,)


Finder = Callable[[Graph], list[Site]]
Builder = Callable[[Graph, Site, Emitter], dict[Value, Value]]


@dataclass(frozen=True, eq=False)
class Substitution:
    """A rewrite rule: ``find`` its sites, ``build`` a site's replacement.

    ``examples(dims)`` builds a small function holding a site, for verification at each of
    ``shapes`` (random inputs, the reference executor) and ``z3_shape`` (a symbolic proof;
    ``None`` where the rule's ops have no symbolic semantics here). ``inverse`` names the
    rule that undoes it, where there is one.
    """

    name: str
    doc: str
    find: Finder
    build: Builder
    examples: Callable[[tuple[int, ...]], Function]
    shapes: tuple[tuple[int, ...], ...]
    z3_shape: tuple[int, ...] | None = None
    inverse: str | None = None

    def sites(self, fn: Function | Graph) -> list[Site]:
        return self.find(fn if isinstance(fn, Graph) else Graph(fn))

    def apply(self, fn: Function | Graph, site: Site) -> Function:
        g = fn if isinstance(fn, Graph) else Graph(fn)
        return rewrite(g, site, self)


def _device(g: Graph) -> int:
    for p in g.fn.params:
        d = getattr(p.type, "device", None)
        if isinstance(d, int):
            return d
    return 0


def rewrite(g: Graph, site: Site, sub: Substitution) -> Function:
    """``g``'s function with ``site``'s ops replaced by what ``sub`` builds (see the module
    docstring). Raises ``TransformError`` when the result does not verify or type-check."""
    return rewrite_tracked(g, site, sub)[0]


def rewrite_tracked(g: Graph, site: Site, sub: Substitution) -> tuple[Function, dict[int, int]]:
    """``rewrite``, and where each kept op of ``g`` is in the result (old -> new position)."""
    from distir.analysis import type_env
    from distir.ir.verify import verify

    em = Emitter(_device(g))
    repl = sub.build(g, site, em)
    removed = set(site.ops)
    for i in site.ops:
        for v in g.ops[i].outputs:
            if v not in repl and (v in g.returned or any(
                    r not in removed for r in g.readers.get(v, []))):
                raise TransformError(f"substitution {sub.name}: result %{v.name} of a "
                                     "replaced op is still used; the rule must map it")
    # Producers left without readers by the removal (a Concat of weights that only fed a
    # replaced op) are dropped too, transitively; nothing else changes.
    count: dict[Value, int] = {}
    for i, op in enumerate(g.ops):
        if i in removed:
            continue
        for u in op.inputs:
            if u is not None:
                count[u] = count.get(u, 0) + 1
    for op in em.ops:
        for u in op.inputs:
            if u is not None:
                count[u] = count.get(u, 0) + 1
    for r in repl.values():
        count[r] = count.get(r, 0) + 1
    work = [v for i in site.ops for v in g.ops[i].inputs if v is not None]
    while work:
        v = work.pop()
        j = g.producer.get(v)
        if j is None or j in removed or v in g.returned:
            continue
        op = g.ops[j]
        if any(count.get(o, 0) or o in g.returned for o in op.outputs):
            continue
        removed.add(j)
        for u in op.inputs:
            if u is not None:
                count[u] = count.get(u, 0) - 1
                work.append(u)
    last = max(site.ops)
    order: list[Op] = []
    origin: list[int] = []
    for i, op in enumerate(g.ops):
        if i == last:
            order.extend(em.ops)
            origin.extend([-1] * len(em.ops))
        if i not in removed:
            order.append(op)
            origin.append(i)
    fn, placed = _rebuild(g.fn, order, repl)
    try:
        verify(fn)
        type_env(fn)
    except Exception as e:  # noqa: BLE001 - reported as the rule's failure, in one line
        msg = getattr(e, "message", str(e)).splitlines()[0]
        raise TransformError(f"substitution {sub.name} at {site.describe(g)} gave an "
                             f"invalid function: {msg}") from None
    return fn, {origin[k]: j for j, k in enumerate(placed) if origin[k] >= 0}


def _rebuild(fn: Function, order: list[Op], repl: dict[Value, Value],
             ) -> tuple[Function, list[int]]:
    """Fresh values and ops for ``order`` (inputs renamed through ``repl``), sorted so that
    every value is defined before use, keeping the given order where it already is."""

    def sub(v: Value | None) -> Value | None:
        while v is not None and v in repl:
            v = repl[v]
        return v

    params = [Value(p.name, p.type) for p in fn.params]
    new: dict[Value, Value] = dict(zip(fn.params, params, strict=True))
    ins = [[sub(v) for v in op.inputs] for op in order]
    maker: dict[Value, int] = {v: k for k, op in enumerate(order) for v in op.outputs}
    deps = [{maker[v] for v in vs if v is not None and v in maker} for vs in ins]
    waiting = [len(d) for d in deps]
    readers: dict[int, list[int]] = {}
    for k, d in enumerate(deps):
        for j in sorted(d):
            readers.setdefault(j, []).append(k)
    ready = [k for k, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    ops: list[Op] = []
    placed: list[int] = []
    while ready:
        k = heapq.heappop(ready)
        placed.append(k)
        op = order[k]
        outs = [Value(o.name, o.type) for o in op.outputs]
        new.update(zip(op.outputs, outs, strict=True))
        ops.append(Op(op.op_type, [None if v is None else new[v] for v in ins[k]],
                      dict(op.attrs) if op.attrs else None, outs, op.callee, op.loc))
        for r in readers.get(k, []):
            waiting[r] -= 1
            if waiting[r] == 0:
                heapq.heappush(ready, r)
    if len(ops) != len(order):
        raise TransformError(f"@{fn.name}: a substitution made a cycle")
    out = Function(fn.name, params, ops, [new[sub(v)] for v in fn.returns],  # type: ignore[index]
                   fn.return_types, fn.loc, fn.end_loc)
    out.initializers = dict(fn.initializers)
    return out, placed


def structural_hash(fn: Function) -> str:
    """A digest of what ``fn`` computes, structurally: each value is digested from its op's
    type, attributes, result index and its inputs' digests (a parameter from its position
    and type), and the function from its results'. Names and the order of independent ops
    take no part, so two rewrites applied in either order give one digest."""
    memo: dict[Value, bytes] = {}
    for k, p in enumerate(fn.params):
        memo[p] = hashlib.blake2b(repr(("param", k, p.type)).encode(), digest_size=16).digest()
    for op in fn.ops:
        h = hashlib.blake2b(repr((op.op_type, op.attrs_key)).encode(), digest_size=16)
        for v in op.inputs:
            h.update(b"-" if v is None else memo[v])
        base = h.digest()
        for k, v in enumerate(op.outputs):
            memo[v] = hashlib.blake2b(base + bytes([k % 256]), digest_size=16).digest()
    h = hashlib.blake2b(digest_size=16)
    for v in fn.returns:
        h.update(memo[v])
    return h.hexdigest()
