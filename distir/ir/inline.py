"""Inlining: a function with every call replaced by its callee's ops."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from distir._util import no_gc
from distir.ir.core import Function, Op, Value

__all__ = ["inline_calls", "inline_top_calls"]


def inline_calls(fn: Function) -> Function:
    """``fn`` with every call replaced by its callee's ops, recursively: a flat function
    that computes the same results. It keeps ``fn``'s parameters (so bindings by parameter,
    and ``initializers``, carry over); every other value is new, with the name and declared
    type of the value it copies."""
    ops: list[Op] = []

    def inline(f: Function, args: list[Value | None]) -> list[Value | None]:
        env: dict[Value, Value | None] = dict(zip(f.params, args))
        for op in f.ops:
            ins = [None if v is None else env.get(v, v) for v in op.inputs]
            if op.callee is not None:
                env.update(zip(op.outputs, inline(op.callee, ins)))
                continue
            outs = [Value(v.name, v.type) for v in op.outputs]
            env.update(zip(op.outputs, outs))
            ops.append(Op(op.op_type, ins, dict(op.attrs) or None, outs))
        return [env.get(v, v) for v in f.returns]

    with no_gc():
        rets = inline(fn, list(fn.params))
    out = Function(fn.name, fn.params, ops, rets, fn.return_types)  # type: ignore[arg-type]
    out.initializers = dict(fn.initializers)
    return out


def inline_top_calls(fn: Function, which: Callable[[Function], bool], *,
                     consume: bool = False) -> Function:
    """``fn`` with each of its own calls of a function ``which`` accepts replaced by that
    function's ops (one level: what the callee calls stays a call); ``fn`` itself when
    there is none. Consecutive calls of one function (``dtp``'s per-replica functions)
    that read none of each other's results are written out op by op, interleaved: the
    callee's first op for each call, then its second, ..., as ``dtp`` writes the replicas'
    copies of an op together. Parameters, names and declared types are kept as in
    ``inline_calls``.

    ``consume``: ``fn`` and the functions inlined are not used afterwards, so the result
    may take over their ops and values (ops that read no inlined result are kept as they
    are, and the values a function called once makes are its copy's): for a builder that
    writes a function only to write it out again."""
    if not any(op.callee is not None and which(op.callee) for op in fn.ops):
        return fn
    ops: list[Op] = []
    env: dict[Value, Value | None] = {}

    def args(op: Op, table: dict[Value, Value | None]) -> list[Value | None]:
        get: Any = table.get  # (None is never a key)
        return list(map(get, op.inputs, op.inputs))

    with no_gc():
        i, n = 0, len(fn.ops)
        while i < n:
            op = fn.ops[i]
            callee = op.callee
            if callee is None or not which(callee):
                if consume and env.keys().isdisjoint(op.inputs):
                    ops.append(op)
                else:
                    ops.append(Op(op.op_type, args(op, env), dict(op.attrs) or None,
                                  op.outputs, callee=callee))
                i += 1
                continue
            j = i + 1
            made_by_run = set(op.outputs)
            # A call that reads an earlier call's result (the passes' consecutive layers)
            # starts a run of its own: interleaved, it would read it before it is made.
            while j < n and fn.ops[j].callee is callee \
                    and made_by_run.isdisjoint(fn.ops[j].inputs):
                made_by_run.update(fn.ops[j].outputs)
                j += 1
            calls = fn.ops[i:j]
            inner = [dict(zip(callee.params, args(c, env))) for c in calls]
            # A result the callee makes is the call's own result value (its name too).
            made = {o for cop in callee.ops for o in cop.outputs}
            own: list[dict[Value, Value]] = [{} for _ in calls]
            for r, v in enumerate(callee.returns):
                if v in made:
                    for c, m in zip(calls, own):
                        m.setdefault(v, c.outputs[r])
            if consume and len(calls) == 1:  # the callee's ops and values are the copy's
                table, m = inner[0], own[0]
                table.update(m)
                for cop in callee.ops:
                    if table.keys().isdisjoint(cop.inputs) and \
                            m.keys().isdisjoint(cop.outputs):
                        ops.append(cop)
                    else:
                        ops.append(Op(cop.op_type, args(cop, table), dict(cop.attrs) or None,
                                      list(map(m.get, cop.outputs, cop.outputs)),
                                      callee=cop.callee))
            else:
                for cop in callee.ops:
                    for table, m in zip(inner, own):
                        outs = [m.get(v) or Value(v.name, v.type) for v in cop.outputs]
                        ops.append(Op(cop.op_type, args(cop, table), dict(cop.attrs) or None,
                                      outs, callee=cop.callee))
                        table.update(zip(cop.outputs, outs))
            for c, t in zip(calls, inner):
                for o, ret in zip(c.outputs, callee.returns):
                    x = t.get(ret, ret)
                    if x is not o:
                        env[o] = x
            i = j
        rets = [env.get(v, v) for v in fn.returns]
    out = Function(fn.name, fn.params, ops, rets, fn.return_types)  # type: ignore[arg-type]
    out.initializers = dict(fn.initializers)
    return out
