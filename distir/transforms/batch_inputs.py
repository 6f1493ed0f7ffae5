"""The batch inputs of a sequential function: the parameters whose axis 0 is the batch.

In order of precedence:

1. the names the caller gives (``batch_inputs=[...]``, ``--batch-input``), checked;
2. in a function whose weights are bound to initializers (an imported model, its training
   step), the parameters that are not: the first dimension most of them share (larger
   than 1) is the batch size, and those with it are the batch inputs (a tie between two
   sizes asks for the names);
3. in a function without initializers (the builders'), the parameters in a *data role*
   (``_DATA_ROLES``: a matrix product's or convolution's left operand, gather indices, a
   loss's target).

Never an optimizer's trained state. Other parameters join during the propagation when an
op demands their split (``Sharding._accept_batch``).
"""

from __future__ import annotations

from collections.abc import Sequence

from distir.errors import TransformError
from distir.ir.core import Value
from distir.transforms.program import Program

__all__ = ["find_batch_inputs"]

_DATA_ROLES = {("MatMul", 0), ("MatMulGrad", 0), ("Gemm", 0), ("Conv", 0), ("Gather", 1),
               ("MSELoss", 1), ("MSELossGrad", 1), ("SoftmaxCrossEntropyLoss", 1),
               ("SoftmaxCrossEntropyLossGrad", 1)}

_ASK = "name the batch inputs (batch_inputs=[...], --batch-input)"


def find_batch_inputs(prog: Program, names: Sequence[str] | None, trained: set[Value],
                      bound: frozenset[Value]) -> tuple[list[Value], int | None]:
    """``(batch inputs, batch size)``; the size is ``None`` when there is no batch."""
    if names is not None:
        return _named(prog, names, trained)
    if bound:
        return _unbound(prog, trained, bound)
    return _roles(prog, trained)


def _named(prog: Program, names: Sequence[str], trained: set[Value],
           ) -> tuple[list[Value], int | None]:
    by_name = {p.name: p for p in prog.fn.params}
    chosen: list[Value] = []
    for n in names:
        p = by_name.get(n)
        if p is None:
            raise TransformError(f"batch input {n!r} is not a parameter of "
                                 f"@{prog.fn.name} (its parameters: "
                                 f"{', '.join(f'%{q.name}' for q in prog.fn.params)})")
        if not prog.shape(p):
            raise TransformError(f"batch input %{n} is a scalar: it has no batch axis")
        if p in trained:
            raise TransformError(f"batch input %{n} is a trained weight")
        chosen.append(p)
    first = [prog.shape(p)[0] for p in chosen]
    for p, size in zip(chosen, first, strict=True):
        if size != first[0]:
            raise TransformError(f"the batch inputs %{chosen[0].name} and %{p.name} have "
                                 f"first dimensions {first[0]} and {size}")
    return chosen, (first[0] if chosen else None)


def _unbound(prog: Program, trained: set[Value], bound: frozenset[Value],
             ) -> tuple[list[Value], int | None]:
    cands = [p for p in prog.fn.params if p not in bound and p not in trained
             and prog.shape(p) and p in prog.users]
    count: dict[int, int] = {}
    for p in cands:
        n = prog.shape(p)[0]
        if n > 1:
            count[n] = count.get(n, 0) + 1
    if not count:
        return [p for p in cands if prog.shape(p)[0] == 1], (1 if cands else None)
    best = max(count.values())
    top = [n for n, c in count.items() if c == best]
    if len(top) > 1:
        p1 = next(p for p in cands if prog.shape(p)[0] == top[0])
        p2 = next(p for p in cands if prog.shape(p)[0] == top[1])
        raise TransformError(f"cannot tell the batch size: the inputs %{p1.name} and "
                             f"%{p2.name} have first dimensions {top[0]} and {top[1]}; {_ASK}")
    return [p for p in cands if prog.shape(p)[0] == top[0]], top[0]


def _roles(prog: Program, trained: set[Value]) -> tuple[list[Value], int | None]:
    roles: set[Value] = set()
    for i in prog.live_ops:
        op = prog.ops[i]
        for k, v in enumerate(op.inputs):
            if v is not None and (op.op_type, k) in _DATA_ROLES and v in prog.param_set:
                roles.add(v)
    sizes: dict[int, Value] = {}
    for p in prog.fn.params:
        if p in roles and p not in trained and len(prog.shape(p)) >= 1:
            sizes.setdefault(prog.shape(p)[0], p)
    big = {n: p for n, p in sizes.items() if n > 1}
    if len(big) > 1:
        (n1, p1), (n2, p2) = list(big.items())[:2]
        raise TransformError(f"cannot tell the batch size: the batch inputs %{p1.name} and "
                             f"%{p2.name} have first dimensions {n1} and {n2}; {_ASK}")
    if not sizes:
        return [], None
    size = next(iter(big)) if big else 1
    return [p for p in prog.fn.params if p in roles and p not in trained
            and len(prog.shape(p)) >= 1 and prog.shape(p)[0] == size], size
