"""Inlining: a function with every call replaced by its callee's ops."""

from __future__ import annotations

from distir._util import no_gc
from distir.ir.core import Function, Op, Value

__all__ = ["inline_calls"]


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
