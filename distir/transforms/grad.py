"""Reverse-mode automatic differentiation of a DistIR function: ``grad``.

``grad(fn, wrt)`` returns a new function with ``fn``'s parameters whose results are the
loss (``fn``'s first result, a scalar) followed by the gradient of the loss with respect to
each parameter named in ``wrt``. It works in one pass over the program:

1. calls are inlined and type propagation runs once, so every value's type (and every
   shape tensor's value) is static;
2. the *active* values are those that depend on a ``wrt`` parameter through floating-point
   dataflow and on which the loss depends; only they get cotangents (integer indices, shape
   chains and constants get none, and nothing is emitted for them);
3. the forward ops are copied, the loss is seeded with ones, and the ops are walked in
   reverse: each op with an active input and a cotangent on a result asks its VJP rule
   (``distir.transforms.vjp.VJP_RULES``) for its inputs' cotangents; the cotangents of a
   value used several times are summed with ``Add`` as they arrive;
4. ops whose results nothing reads are dropped, and the result is verified.

Invariants: no value name is read (values are keyed by identity); ``initializers`` carry
over; a ``wrt`` parameter that the loss does not depend on gets a zero gradient.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from distir._util import no_gc
from distir.analysis.api import type_env
from distir.analysis.rules import full_attrs
from distir.analysis.values import type_of
from distir.errors import DistIRError, TransformError
from distir.ir.builder import FunctionBuilder
from distir.ir.core import Function, Op, Value
from distir.ir.inline import inline_calls
from distir.ir.types import ScalarType, TensorType
from distir.ir.verify import verify
from distir.transforms.vjp import VJP_RULES, VJPContext, load_vjp_rules

__all__ = ["grad", "differentiate", "default_wrt", "drop_dead_ops"]


def _is_float(a: Any) -> bool:
    t = type_of(a) if a is not None else None
    return isinstance(t, TensorType | ScalarType) and t.dtype.is_float


def default_wrt(fn: Function) -> list[str]:
    """The parameters differentiated by default: every floating-point parameter bound to an
    initializer of at least one dimension, in parameter order. A 0-d initializer is taken
    for a constant of the forward pass that the exporter stored as an initializer (torch's
    dynamo exporter stores every scalar so: an attention scale, a mask's fill value, the
    exponent of a ``Pow``, whose gradient ``x^y·log x`` is NaN wherever ``x < 0``); ONNX
    does not say which initializers are trained, and module parameters are tensors of at
    least one dimension but for rare learnable scalars, which ``wrt`` names."""
    out = []
    for p in fn.params:
        if p.name is not None and p.name in fn.initializers:
            a = np.asarray(fn.initializers[p.name])
            if np.issubdtype(a.dtype, np.floating) and a.ndim > 0:
                out.append(p.name)
    return out


def _resolve_wrt(fn: Function, wrt: Sequence[str] | None) -> list[Value]:
    by_name: dict[str, Value] = {}
    for p in fn.params:
        if p.name is not None:
            by_name.setdefault(p.name, p)
    if wrt is None:
        wrt = default_wrt(fn)
        if not wrt:
            raise TransformError(f"@{fn.name} has no floating-point parameter bound to an "
                                 "initializer to differentiate by default; pass wrt=[names]")
    if isinstance(wrt, str):
        raise TransformError(f"wrt must be a list of parameter names, got the string {wrt!r}; "
                             f"write wrt=[{wrt!r}]")
    out: list[Value] = []
    for name in wrt:
        q = by_name.get(name)
        if q is None:
            known = ", ".join(by_name) if len(by_name) <= 12 else ", ".join(list(by_name)[:12])
            raise TransformError(f"grad: wrt names %{name}, which is not a parameter of "
                                 f"@{fn.name} (parameters: {known}); pass parameter names")
        out.append(q)
    return out


def _active(fn: Function, env: dict[Value, Any], wrt: list[Value], loss: Value) -> set[Value]:
    """Values on a floating-point path from a ``wrt`` parameter to the loss."""
    fwd: set[Value] = {p for p in wrt if _is_float(env.get(p))}
    for op in fn.ops:
        if any(v is not None and v in fwd for v in op.inputs):
            fwd.update(o for o in op.outputs if _is_float(env.get(o)))
    live: set[Value] = {loss}
    for op in reversed(fn.ops):
        if any(o in live for o in op.outputs):
            live.update(v for v in op.inputs if v is not None)
    return fwd & live


def grad(fn: Function, wrt: Sequence[str] | None = None) -> Function:
    """The loss and its gradients: see the module docstring.

    ``wrt`` names parameters of ``fn`` (data inputs allowed); by default every
    floating-point parameter bound to an initializer. The result has ``fn``'s parameters
    (and initializers) and the results ``loss, d loss / d wrt[0], ...``.
    """
    return differentiate(fn, wrt)


def differentiate(fn: Function, wrt: Sequence[str] | None = None,
                  recompute: Sequence[Sequence[Op]] = ()) -> Function:
    """``grad``, with activation recomputation: each element of ``recompute`` is a group of
    forward ops of ``fn`` (a layer, in program order, ``fn`` free of calls). The backward
    pass copies a group's ops right before the first of its VJPs and differentiates the
    copies, so the group's own activations are needed only in the forward pass; the values
    the group reads from outside (its input, weights) are what is kept."""
    if any(op.callee is not None for op in fn.ops):
        if recompute:
            raise TransformError("grad: recomputed groups must be ops of a call-free function")
        fn = inline_calls(fn)
    if not fn.returns:
        raise TransformError(f"grad: @{fn.name} returns nothing; its first result must be the "
                             "scalar loss")
    params = _resolve_wrt(fn, wrt)
    env = type_env(fn)
    loss = fn.returns[0]
    lt = type_of(env.get(loss)) if env.get(loss) is not None else None
    if isinstance(lt, ScalarType):
        lt = TensorType(lt.dtype, (), lt.device)
    if not isinstance(lt, TensorType) or lt.numel != 1 or not lt.dtype.is_float:
        raise TransformError(f"grad: the first result of @{fn.name} must be a floating-point "
                             f"scalar loss, got {lt}; reduce it first (e.g. ReduceSum, or "
                             "use training_step)")
    load_vjp_rules()
    with no_gc():
        out = _differentiate(fn, env, params, loss, lt, recompute)
    verify(out)
    return out


def _differentiate(fn: Function, env: dict[Value, Any], params: list[Value], loss: Value,
                   lt: TensorType, recompute: Sequence[Sequence[Op]]) -> Function:
    active = _active(fn, env, params, loss)
    b = FunctionBuilder(fn.name)
    new: dict[Value, Value] = {}
    for p in fn.params:
        new[p] = b.param(p.name, p.type)
    for op in fn.ops:
        outs = [Value(o.name, o.type) for o in op.outputs]
        new.update(zip(op.outputs, outs))
        b.ops.append(Op(op.op_type, [None if v is None else new[v] for v in op.inputs],
                        dict(op.attrs) or None, outs))
    loss_new = new[loss]
    consts: dict[tuple, Value] = {}
    cx = VJPContext(b, env, new, consts)
    cot: dict[Value, Value] = {}
    if loss in active:
        cx.at(Op("Identity", (loss,), None, (loss,)), {})
        cot[loss] = cx.const(np.ones(lt.shape, dtype=lt.dtype.np))
        cx.ones.add(cot[loss])
    attrs_memo: dict[tuple, dict[str, Any]] = {}
    group_of: dict[Op, int] = {op: g for g, ops in enumerate(recompute) for op in ops}
    done: set[int] = set()
    for op in reversed(fn.ops):
        douts = tuple(cot.get(o) for o in op.outputs)
        if all(d is None for d in douts):
            continue
        need = tuple(v is not None and v in active for v in op.inputs)
        if not any(need):
            continue
        g_idx = group_of.get(op)
        if g_idx is not None and g_idx not in done:
            done.add(g_idx)
            for fop in recompute[g_idx]:  # the copies now stand for the group's values
                outs = [Value(o.name, o.type) for o in fop.outputs]
                ins = [None if v is None else new[v] for v in fop.inputs]
                new.update(zip(fop.outputs, outs))
                b.ops.append(Op(fop.op_type, ins, dict(fop.attrs) or None, outs))
        rule = VJP_RULES.get(op.op_type)
        if rule is None:
            raise TransformError(f"grad: no VJP rule for op {op.op_type} (result "
                                 f"%{op.outputs[0].name}) on a differentiable path; add one "
                                 "to distir/transforms/vjp/ or leave its inputs out of wrt")
        key = (op.op_type, op.attrs_key)
        attrs = attrs_memo.get(key)
        if attrs is None:
            attrs = attrs_memo[key] = full_attrs(op.op_type, op.attrs)
        try:
            grads = rule(cx.at(op, attrs), douts, need)
        except DistIRError as e:
            if e.message.startswith("grad:"):
                raise
            raise TransformError(f"grad: {e.message} (at result %{op.outputs[0].name})"
                                 ) from None
        for v, g, n in zip(op.inputs, grads, need):
            if not n or g is None or v is None:
                continue
            prev = cot.get(v)
            cot[v] = g if prev is None else b.op("Add", prev, g)
    results = [loss_new]
    for p in params:
        g = cot.get(p)
        if g is None:
            t = env.get(p)
            pt = type_of(t)
            if isinstance(pt, ScalarType):
                pt = TensorType(pt.dtype, (), pt.device)
            if not isinstance(pt, TensorType) or not pt.dtype.is_float:
                raise TransformError(f"grad: wrt names %{p.name}, which is not a "
                                     f"floating-point tensor ({pt}); leave it out of wrt")
            cx.at(Op("Identity", (p,), None, (p,)), {})
            g = cx.zeros(pt)
        results.append(g)
    out = drop_dead_ops(b.ret(*results))
    out.initializers = dict(fn.initializers)
    return out


def drop_dead_ops(fn: Function) -> Function:
    """``fn`` without the ops none of whose results is read (the ops are side-effect free
    on one device; communication ops are kept)."""
    from distir.ir.schemas import COMM_OPS

    live: set[Value] = set(fn.returns)
    keep: list[Op] = []
    for op in reversed(fn.ops):
        if op.op_type in COMM_OPS or any(o in live for o in op.outputs):
            keep.append(op)
            live.update(v for v in op.inputs if v is not None)
    keep.reverse()
    out = Function(fn.name, fn.params, keep, fn.returns, fn.return_types)
    out.initializers = dict(fn.initializers)
    return out
