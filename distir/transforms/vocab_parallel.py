"""Vocabulary-parallel ops: an embedding table and an LM head split by vocabulary over the
``tp`` ranks, and the cross entropy computed without gathering the logits (Megatron-LM).

Rank ``t`` holds rows ``[t·n, (t+1)·n)`` of a table of ``n·tp`` rows (``n`` local rows),
or the logits of those classes. The layout rules accept these splits
(``layout_shape_rules.gather``, ``layout_index_rules._scatter_nd``,
``layout_rules._xent``); ``emit_vocab`` writes each rank's local ops:

- ``Gather(table, ids)`` along the split axis: ids outside the rank's rows look up row 0
  and are zeroed, so each rank's result holds its rows' lookups and zeros elsewhere; the
  result is partial over the ranks (the emitter sums it with one ``MPIAllreduce``).
- ``ScatterND(data, ids, updates, reduction="add")`` into a split axis (an embedding's
  gradient): each rank adds the updates whose id falls in its rows (the others add zeros
  to its row 0).
- ``SoftmaxCrossEntropyLoss(logits, labels)`` with the classes (the last axis) split: the
  row maxima of the ranks are gathered (``MPIAllgather`` of ``(..., 1)``) and their
  maximum ``M`` shifts the logits on every rank alike; ``S`` = the sum over ranks of
  ``sum(exp(z - M))`` (``MPIAllreduce``); the label's logit is picked by the rank that
  holds it (a comparison with the rank's class ids, zeros elsewhere) and summed over the
  ranks; the loss is ``sum(log S + M - z[label])`` (divided by the local label count for
  ``reduction="mean"``). Only ``(..., 1)`` tensors cross the ranks, never the logits.
- ``SoftmaxCrossEntropyLossGrad``: ``exp(z - log S - M)`` minus the one-hot of the labels
  among the rank's classes (the same ``M`` and ``S``, recomputed).

Ids are taken to be in ``[0, n·tp)`` (an embedding's token ids, a loss's class labels).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from distir.ir.core import Op, Value
from distir.transforms.layout import Layout, T

if TYPE_CHECKING:
    from distir.transforms.emit import Emitter
    from distir.transforms.plan import Plan

__all__ = ["VOCAB_OPS", "is_vocab_parallel", "emit_vocab"]

VOCAB_OPS = frozenset({"Gather", "ScatterND", "SoftmaxCrossEntropyLoss",
                       "SoftmaxCrossEntropyLossGrad"})


def _seen(plan: Plan, op: Op, k: int) -> Layout:
    """The layout in which ``op`` takes its input ``k``."""
    v = op.inputs[k]
    assert v is not None
    got = plan.sh.sliced.get((op, k)) if plan.sh.sliced else None
    return got if got is not None else plan.sh.layout[v]


def is_vocab_parallel(plan: Plan, op: Op) -> bool:
    """Whether ``op`` runs vocabulary-parallel under ``plan`` (``emit_vocab`` writes it)."""
    t = op.op_type
    if plan.tp == 1 or t not in VOCAB_OPS or op.inputs[0] is None:
        return False
    marks = _seen(plan, op, 0).marks
    if t == "Gather":
        axis = plan.prog.attrs(op).get("axis", 0)
        return marks[axis] == T
    if t == "ScatterND":
        return bool(marks) and marks[0] == T
    return bool(marks) and marks[-1] == T


def emit_vocab(em: Emitter, op: Op, ins: list) -> list[list[Value]]:
    """Each rank's ops for ``op`` (``ins``: the local inputs, one list per input); returns
    the local results, one list per result (summed over the ranks by the caller where
    partial)."""
    t = op.op_type
    if t == "Gather":
        return [_gather(em, op, ins)]
    if t == "ScatterND":
        return [_scatter(em, op, ins)]
    return [_xent(em, op, ins, grad=t.endswith("Grad"))]


class _Ranks:
    """Appends one op per rank to the emitter's ops, with fresh names."""

    def __init__(self, em: Emitter, base: str) -> None:
        self.em, self.base = em, base
        self.tp = em.tp
        self.nr = em.nr

    def op(self, op_type: str, ins: list[list[Value]], attrs: dict | None = None,
           hint: str = "") -> list[Value]:
        outs = [Value(n) for n in self.em.name(f"{self.base}_{hint or op_type.lower()}")]
        for t in range(self.nr):
            self.em.ops.append(Op(op_type, [x[t] for x in ins], attrs, [outs[t]]))
        return outs

    def collective(self, op_type: str, ins: list[Value], attrs: dict | None,
                   hint: str) -> list[Value]:
        outs = [Value(n) for n in self.em.name(f"{self.base}_{hint}")]
        self.em.collective(op_type, ins, attrs, outs)
        return outs

    def const(self, arr: np.ndarray, hint: str) -> list[Value]:
        """The same constant on every rank."""
        return self.em.const(arr, f"{self.base}.{hint}")

    def per_rank(self, arrs: list[np.ndarray], hint: str) -> list[Value]:
        """Rank ``t``'s constant ``arrs[t]`` (of the ranks written), apart from equal
        constants (``ConstFn``)."""
        return self.em.const(np.stack(arrs), f"{self.base}.{hint}", True)


def _in_range(r: _Ranks, ids: list[Value], dtype: np.dtype, n: int, hint: str,
              ) -> tuple[list[Value], list[Value]]:
    """``(local ids, in range)``: each rank's ids shifted to its rows (0 where outside)
    and whether they fall in its ``n`` rows."""
    lo = r.per_rank([np.array(t * n, dtype) for t in range(r.tp)], f"{hint}.first")
    rel = r.op("Sub", [ids, lo], hint=f"{hint}_rel")
    zero = r.const(np.array(0, dtype), "zero_id")
    top = r.const(np.array(n, dtype), "rows")
    ok = r.op("And", [r.op("GreaterOrEqual", [rel, zero]), r.op("Less", [rel, top])],
              hint=f"{hint}_in")
    return r.op("Where", [ok, rel, zero], hint=f"{hint}_local"), ok


def _gather(em: Emitter, op: Op, ins: list) -> list[Value]:
    plan = em.plan
    data, idx = op.inputs
    assert data is not None and idx is not None
    r = _Ranks(em, _base(op))
    axis = plan.prog.attrs(op).get("axis", 0)
    sd = plan.local_shape(data)
    axis = axis + len(sd) if axis < 0 else axis
    si = plan.local_shape(idx)
    li, ok = _in_range(r, ins[1], plan.prog.type(idx).dtype.np, sd[axis], "ids")
    got = r.op("Gather", [ins[0], li], {"axis": axis})
    mask_shape = (1,) * axis + si + (1,) * (len(sd) - axis - 1)
    mask = r.op("Reshape", [ok, r.const(np.array(mask_shape, np.int64), "mask_shape")],
                hint="mask")
    zero = r.const(np.array(0, plan.prog.type(data).dtype.np), "zero")
    return r.op("Where", [mask, got, zero], hint="local")


def _scatter(em: Emitter, op: Op, ins: list) -> list[Value]:
    plan = em.plan
    data, idx, upd = op.inputs
    assert data is not None and idx is not None and upd is not None
    r = _Ranks(em, _base(op))
    sd, si = plan.local_shape(data), plan.local_shape(idx)
    li, ok = _in_range(r, ins[1], plan.prog.type(idx).dtype.np, sd[0], "ids")
    mask_shape = si[:-1] + (1,) * (len(sd) - 1)
    mask = r.op("Reshape", [ok, r.const(np.array(mask_shape, np.int64), "mask_shape")],
                hint="mask")
    zero = r.const(np.array(0, plan.prog.type(upd).dtype.np), "zero")
    kept = r.op("Where", [mask, ins[2], zero], hint="updates")
    return r.op("ScatterND", [ins[0], li, kept], {"reduction": "add"}, hint="local")


def _xent(em: Emitter, op: Op, ins: list, grad: bool) -> list[Value]:
    plan, tp = em.plan, em.tp
    logits, labels = op.inputs
    assert logits is not None and labels is not None
    r = _Ranks(em, _base(op))
    sz = plan.local_shape(logits)
    rank, n = len(sz), sz[-1]
    dt = plan.prog.type(logits).dtype.np
    lt = plan.prog.type(labels).dtype.np
    z, y = ins
    last = r.const(np.array([rank - 1], np.int64), "last_axis")
    keep = {"keepdims": 1}
    top = r.op("ReduceMax", [z, last], keep, hint="max_local")
    tops = r.collective("MPIAllgather", top, {"axis": rank - 1}, "max_ranks")
    m = r.op("ReduceMax", [tops, last], keep, hint="max")
    shifted = r.op("Sub", [z, m], hint="shifted")
    s = r.op("ReduceSum", [r.op("Exp", [shifted], hint="exp"), last], keep, hint="sum_local")
    lse = r.op("Add", [r.op("Log", [r.collective("MPIAllreduce", s, None, "sum")]), m],
               hint="lse")
    cols = r.per_rank([np.arange(t * n, (t + 1) * n, dtype=lt) for t in range(tp)],
                      "classes")
    hit = r.op("Equal", [r.op("Unsqueeze", [y, last], hint="labels"), cols], hint="onehot")
    zero, one = r.const(np.array(0, dt), "zero"), r.const(np.array(1, dt), "one")
    count = int(np.prod(plan.local_shape(labels)))
    mean = plan.prog.attrs(op).get("reduction") == "mean"
    if grad:
        p = r.op("Exp", [r.op("Sub", [z, lse], hint="logp")], hint="softmax")
        out = r.op("Sub", [p, r.op("Where", [hit, one, zero], hint="onehot_f")], hint="grad")
    else:
        picked = r.op("ReduceSum", [r.op("Where", [hit, z, zero], hint="picked"), last], keep,
                      hint="label_logit_local")
        label_logit = r.collective("MPIAllreduce", picked, None, "label_logit")
        rows = r.op("Sub", [lse, label_logit], hint="rows")
        every = r.const(np.arange(rank, dtype=np.int64), "all_axes")
        out = r.op("ReduceSum", [rows, every], {"keepdims": 0}, hint="loss")
    if mean and count:
        out = r.op("Mul", [out, r.const(np.array(1.0 / count, dt), "inv_count")],
                   hint="mean")
    return out


def _base(op: Op) -> str:
    v = op.outputs[0]
    return v.name if v.name and v.name != "_" else "v"
