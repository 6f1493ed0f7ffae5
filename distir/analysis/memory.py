"""Liveness: when each value's storage is allocated and freed, computed once per function.

The model (what ``Simulation.peak_memory_bytes`` measures):

- An entry function's parameters are live throughout the step.
- Every other value is live from the op that defines it to its last use (an op that reads
  it, or the ``return`` that hands it to the caller, after which the caller's liveness
  takes over). A value that is never used is freed right after the op that defines it.
- A value occupies ``type.size_bytes`` on the device its type names, so a transferred value
  counts on the receiving device (a ``Send``'s result) and on the sending one until the
  original's last use.
- Calls: a callee's temporaries are counted inside the callee; its results are allocated
  there and become the caller's values. A result that is one of the callee's parameters
  (or the same value returned twice) is an alias, not new storage. An argument whose last
  use is the call, passed once and not returned, is *handed over*: the callee frees it at
  its own last use, and a result the caller never uses is freed inside the callee at its
  last use there: exactly as if the callee were written inline.

``FunctionLiveness`` holds, per op, what to free after it; it depends only on the
program's structure, never on types, so it is computed once per function.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from distir.ir.core import Function, Op, Value
from distir.ir.types import TensorType, TupleType, Type

__all__ = ["OpLiveness", "NOTHING", "FunctionLiveness", "Memo", "liveness", "placed_bytes"]


OpLiveness = tuple
"""What dies at one op, as a plain tuple ``(free_in, free_param, free_out, give, drop)``
(built once per op, read once per simulated op, so kept as cheap as possible):

- ``free_in``: input positions whose storage dies after the op (one position per
  storage), not parameters of the function;
- ``free_param``: ``(input position, parameter index)`` of parameters whose last use in
  the function is the op: freed only when the caller handed that parameter over;
- ``free_out``: results never used (freed right after the op; never for a call);
- ``give``: for a call, ``(input position, parameter index or -1)`` of the arguments
  handed over to the callee (-1: a value of this function; else handed over only if this
  function owns that parameter);
- ``drop``: for a call, the positions of the results the caller never uses: the callee
  frees them at their last use inside it, as the inlined program would.
"""

NOTHING: OpLiveness = ((), (), (), (), frozenset())

_NO_DROP: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class FunctionLiveness:
    """Liveness facts of one function, for callers that use all but ``drop`` of its results.

    ``ops`` maps each op to its ``OpLiveness``; ``unused_params`` are parameter indices
    never used nor returned (the caller does not count such an argument as a use);
    ``return_param[i]`` is the index of the parameter that return ``i`` is (an alias),
    else ``None``; ``return_dup[i]`` the index of an earlier return with the same storage,
    else ``None``; ``returned_params`` the parameters returned (never handed over).
    """

    ops: dict[Op, OpLiveness]
    unused_params: frozenset[int]
    return_param: tuple[int | None, ...]
    return_dup: tuple[int | None, ...]
    returned_params: frozenset[int]
    drop: frozenset[int]


Memo = dict[tuple[Function, frozenset[int]], FunctionLiveness]


def liveness(fn: Function, memo: Memo | None = None, drop: frozenset[int] = _NO_DROP,
             ) -> FunctionLiveness:
    """The liveness facts of ``fn`` when its caller drops the results ``drop`` (and, in
    ``memo``, of the functions it calls).

    One forward pass over the calls finds the results that alias an argument's storage;
    one backward pass finds each storage's last use (the first use seen backwards)."""
    if memo is None:
        memo = {}
    key = (fn, drop)
    hit = memo.get(key)
    if hit is not None:
        return hit
    alias: dict[Value, Value] = {}  # call results that are an argument's storage
    has_calls = False
    for op in fn.ops:
        if op.callee is None:
            continue
        has_calls = True
        cl = liveness(op.callee, memo)
        for i, v in enumerate(op.outputs):
            j = cl.return_param[i]
            if j is not None and j < len(op.inputs) and op.inputs[j] is not None:
                a = op.inputs[j]
                alias[v] = alias.get(a, a)  # type: ignore[arg-type]
            elif cl.return_dup[i] is not None:
                a = op.outputs[cl.return_dup[i]]  # type: ignore[index]
                alias[v] = alias.get(a, a)
    param_index: dict[Value, int] = {p: i for i, p in enumerate(fn.params)}
    kept = [alias.get(r, r) for i, r in enumerate(fn.returns) if i not in drop]
    live: set[Value] = set(kept)  # storages used later, or returned
    infos: dict[Op, OpLiveness] = {}
    for op in reversed(fn.ops):
        outs = op.outputs
        free_out: tuple[int, ...] = ()
        skip: frozenset[int] = _NO_DROP
        cl = None
        dropped = _NO_DROP
        if has_calls and op.callee is not None:
            dropped = frozenset(i for i, v in enumerate(outs) if alias.get(v, v) not in live)
            cl = liveness(op.callee, memo, dropped)
            skip = cl.unused_params
        elif len(outs) == 1:
            if outs[0] not in live:
                free_out = (0,)
        else:
            fo = [i for i, v in enumerate(outs) if v not in live]
            if fo:
                free_out = tuple(fo)
        dying = None
        for pos, v in enumerate(op.inputs):
            if v is None or pos in skip:  # an argument the callee never touches is no use
                continue
            if alias:
                v = alias.get(v, v)
            if v not in live:
                live.add(v)
                if dying is None:
                    dying = [(pos, v)]
                else:
                    dying.append((pos, v))
        if dying is None:
            infos[op] = (((), (), free_out, (), dropped) if free_out or dropped
                         else NOTHING)
            continue
        free_in: list[int] = []
        free_param: list[tuple[int, int]] = []
        give: list[tuple[int, int]] = []
        for pos, r in dying:
            pi = param_index.get(r, -1)
            if cl is not None and pos not in cl.returned_params and sum(
                    1 for v in op.inputs if v is not None and alias.get(v, v) is r) == 1:
                give.append((pos, pi))
            elif pi >= 0:
                free_param.append((pos, pi))
            else:
                free_in.append(pos)
        infos[op] = (tuple(free_in), tuple(free_param), free_out, tuple(give), dropped)
    unused = frozenset(i for i, p in enumerate(fn.params) if p not in live)
    ret_param: list[int | None] = []
    ret_dup: list[int | None] = []
    first_ret: dict[Value, int] = {}
    for i, r in enumerate(fn.returns):
        rr = alias.get(r, r)
        ret_param.append(param_index.get(rr))
        if rr in first_ret and rr not in param_index:
            ret_dup.append(first_ret[rr])
        else:
            ret_dup.append(None)
            first_ret.setdefault(rr, i)
    returned_params = frozenset(j for i, j in enumerate(ret_param)
                                if j is not None and i not in drop)
    fl = memo[key] = FunctionLiveness(infos, unused, tuple(ret_param), tuple(ret_dup),
                                      returned_params, drop)
    return fl


def placed_bytes(t: Any) -> tuple[tuple[int, int], ...]:
    """``((device, bytes), ...)`` that a value of type ``t`` occupies."""
    if isinstance(t, TensorType):
        return ((t.device, t.size_bytes),)
    if isinstance(t, TupleType):
        out: list[tuple[int, int]] = []
        for s in t.types:
            out.extend(placed_bytes(s))
        return tuple(out)
    if isinstance(t, Type):
        return tuple((d, t.size_bytes) for d in t.devices[:1])
    return ()
