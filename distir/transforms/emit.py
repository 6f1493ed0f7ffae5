"""Part of the builder tower (``distir.transforms.tower``, ``dtp`` before the spmd passes).

Writing the local ops of one sequential op for a tensor-parallel group.

Every sequential value maps to ``tp`` local values, one per rank. ``Emitter.emit`` appends,
for one sequential op, its local copy on each rank (rank-major within the op, so the ranks'
copies are consecutive and overlap in time) and then the collectives the layouts call for:

- a result partial over the ranks (a row-parallel product) gets an ``MPIAllreduce`` over
  the group, named ``%x_part_tp0, ...`` before and ``%x_tp0, ...`` after; a row-parallel
  ``Gemm`` or ``Conv`` adds its (whole) bias on rank 0 only, so that the sum holds it once;
- a whole weight that the op takes split (``Sharding.sliced``) is split on each rank,
  which keeps its own part;
- a shape operand (the target of ``Reshape``/``Expand``, the sizes of ``Split``) becomes the
  local shape, a constant supplied by the caller (``const``);
- a mean over split values (a ``reduction="mean"`` loss, ``ReduceMean``, the running
  statistics of ``BatchNormalization``) is scaled by the shard count.

A program written for tensor-parallel rank 0 alone (``Plan.written_tp``, ``dtp_replica``)
maps each sequential value to rank 0's local value only, and writes each collective over
the ranks as rank 0's part of it (``PeerAllreduce``, ``PeerAllgather``, see
``distir.analysis.replicas``).

The emitter is shared by the stage functions (generic over devices, constants passed in)
and by the top-level function (which places constants with ``Constant(device=...)``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from distir.ir.core import Op, Value
from distir.transforms.layout import Layout, T
from distir.transforms.layout_rules import MEAN_SCALED, mean_scale_marks
from distir.transforms.plan import Plan
from distir.transforms.program import SHAPE_OPERANDS
from distir.transforms.vocab_parallel import VOCAB_OPS, emit_vocab, is_vocab_parallel

__all__ = ["Emitter", "Namer", "base_name", "scaled_outputs", "local_group"]

Namer = Callable[[str], list[str]]
"""``base name -> the names of its local values``, one per rank."""
class ConstFn(Protocol):
    """``(array, name hint) -> one value per rank`` holding that constant. With
    ``per_rank``, ``array`` stacks one constant per rank of the group (rank ``t``'s is
    ``array[t]``: its first row, its class ids), kept apart from every constant of equal
    value (``Plan.const_key``), so that every rank holds as many constants as the
    others."""

    def __call__(self, arr: np.ndarray, hint: str, per_rank: bool = False) -> list[Value]:
        ...


def scaled_outputs(plan: Plan, op: Op) -> list[tuple[int, str]]:
    """``(result index, marks)`` of the results of ``op`` that are means over split axes
    (see ``mean_scale_marks``), each scaled by its shard count."""
    if op.op_type not in MEAN_SCALED:
        return []
    sh = plan.sh
    attrs = plan.prog.attrs(op)
    ins = tuple(sh.layout[v] for v in op.inputs if v is not None)
    out = []
    for k, o in enumerate(op.outputs):
        m = mean_scale_marks(op.op_type, attrs, ins, k, sh.partial.get(o, ""))
        if m:
            out.append((k, m))
    return out


_GROUPED = frozenset({"Conv", "ConvGrad"})


def local_group(plan: Plan, op: Op) -> int | None:
    """The local ``group`` of a depthwise convolution (or its gradient) whose channels are
    split over the ranks (each rank convolves its own channels), else ``None``."""
    g = int(op.attrs.get("group", 1) or 1)  # type: ignore[arg-type]
    x = op.inputs[0]
    if g == 1 or x is None or plan.tp == 1:
        return None
    marks = plan.sh.layout[x].marks
    return g // plan.tp if len(marks) > 1 and marks[1] == T else None


def base_name(v: Value) -> str:
    return v.name if v.name and v.name != "_" else "v"


class Emitter:
    """Appends local ops to ``ops``; ``env`` maps sequential values to their local values."""

    def __init__(self, plan: Plan, ops: list[Op], env: dict[Value, list[Value]],
                 name: Namer, const: ConstFn) -> None:
        self.plan = plan
        self.ops = ops
        self.env = env
        self.name = name
        self.const = const
        self.tp = plan.tp
        self.nr = plan.written_tp
        """The ranks written (``Plan.written_tp``): ``tp``, or rank 0 alone."""
        self.partial = plan.sh.partial
        self.live = plan.prog.live_values
        self._nones = (None,) * self.nr

    def shape_operand(self, op: Op, k: int) -> list[Value]:
        """The local value of shape operand ``k`` of ``op``."""
        src = op.inputs[k]
        hint = src.name if src is not None and src.name else f"{base_name(op.outputs[0])}.shape"
        return self.const(self.plan.shape_operand(op, k), hint)

    def emit(self, op: Op) -> None:
        env, tp, names = self.env, self.tp, self.name
        op_type = op.op_type
        ins: list[list[Value] | tuple] = []
        sliced = self.plan.sh.sliced
        for k, v in enumerate(op.inputs):
            if v is None:
                ins.append(self._nones)
            elif (op_type, k) in SHAPE_OPERANDS:
                ins.append(self.shape_operand(op, k))
            elif sliced and (op, k) in sliced:
                lay = sliced[(op, k)]
                ins.append(self._slice(v, env[v], lay) if T in lay.marks else
                           self._gather(v, env[v], self.plan.sh.layout[v]))
            else:
                ins.append(env[v])
        if op_type in VOCAB_OPS and is_vocab_parallel(self.plan, op):
            self._finish(op, emit_vocab(self, op, ins))
            return
        per_rank = list(zip(*ins, strict=True)) if ins else [()] * self.nr
        attrs = op.attrs or None
        if op_type in _GROUPED and tp > 1:
            g = local_group(self.plan, op)
            if g is not None:
                attrs = {**op.attrs, "group": g}
        append = self.ops.append
        partial = self.partial
        outs = op.outputs
        if len(outs) == 1:  # the common case, kept lean
            o = outs[0]
            b = base_name(o)
            red = tp > 1 and T in partial.get(o, "") and o in self.live
            vals = [Value(n) for n in names(b + "_part" if red else b)]
            bias_once = red and op_type in ("Gemm", "Conv") and len(op.inputs) > 2
            for t, (x, y) in enumerate(zip(per_rank, vals, strict=True)):
                append(Op(op_type, x[:2] if bias_once and t else x, attrs, (y,)))
            results = [vals]
        else:
            results = []
            for o in outs:
                if o.name == "_":
                    results.append([Value("_") for _ in range(self.nr)])
                    continue
                red = tp > 1 and T in partial.get(o, "") and o in self.live
                b = base_name(o)
                results.append([Value(n) for n in names(b + "_part" if red else b)])
            for t, x in enumerate(per_rank):
                append(Op(op_type, x, attrs, [r[t] for r in results]))
        self._finish(op, results)

    def _finish(self, op: Op, results: list[list[Value]]) -> None:
        """Bind ``op``'s local results, each summed over the ranks where it is partial
        and scaled where it is a mean over split axes."""
        tp, names, partial, env = self.tp, self.name, self.partial, self.env
        outs, op_type = op.outputs, op.op_type
        for o, vals in zip(outs, results, strict=True):
            if tp > 1 and T in partial.get(o, "") and o in self.live:
                red_vals = [Value(n) for n in names(base_name(o))]
                self.collective("MPIAllreduce", vals, None, red_vals)
                vals = red_vals
            env[o] = vals
        if op_type in MEAN_SCALED:
            for k, marks in scaled_outputs(self.plan, op):
                env[outs[k]] = self._scale(outs[k], env[outs[k]], marks)

    def collective(self, op_type: str, ins: list[Value], attrs: dict | None,
                   outs: list[Value]) -> None:
        """Append the collective ``op_type`` (``MPIAllreduce`` or ``MPIAllgather``) over the
        ranks: with every rank written, over their values; with rank 0 alone, its part of
        one over every rank (``PeerAllreduce``, ``PeerAllgather``)."""
        if self.nr == self.tp:
            self.ops.append(Op(op_type, ins, attrs, outs))
            return
        peer = {"MPIAllreduce": "PeerAllreduce", "MPIAllgather": "PeerAllgather"}[op_type]
        self.ops.append(Op(peer, ins, {**(attrs or {}), "peers": self.tp}, outs))

    def _slice(self, v: Value, vals: list[Value], lay: Layout) -> list[Value]:
        """Each rank's part of the whole value ``v`` (``vals``, one per rank) split as
        ``lay``: a ``Split`` into ``groups·tp`` equal parts, of which rank ``t`` keeps
        parts ``t, tp + t, ...`` (one per interleaved group, concatenated)."""
        tp = self.tp
        if tp == 1:
            return vals
        a = lay.axis(T)
        assert a is not None
        g = lay.groups
        b = base_name(v)
        out = [Value(n) for n in self.name(b + "_slice")]
        for t, (x, y) in enumerate(zip(vals, out, strict=True)):
            keep = [Value(f"{y.name}_{k}") if g > 1 else y for k in range(g)]
            outs = [keep[q // tp] if q % tp == t else Value("_") for q in range(g * tp)]
            self.ops.append(Op("Split", [x], {"axis": a, "num_outputs": g * tp}, outs))
            if g > 1:
                self.ops.append(Op("Concat", keep, {"axis": a}, [y]))
        return out

    def _gather(self, v: Value, vals: list[Value], lay: Layout) -> list[Value]:
        """The whole value ``v`` on every rank, from its parts ``vals`` split as ``lay``
        (the gradient of a weight sliced on use, ``Sharding._gather_grad``): an
        ``MPIAllgather`` along the split axis; with ``g`` interleaved groups each part is
        viewed as ``(g, n / (g·tp))`` and gathered along the second axis."""
        tp = self.tp
        if tp == 1:
            return vals
        a = lay.axis(T)
        assert a is not None
        g = lay.groups
        b = base_name(v)
        shape = self.plan.local_shape(v)
        if g > 1:
            part = shape[:a] + (g, shape[a] // g) + shape[a + 1:]
            c = self.const(np.array(part, dtype=np.int64), f"{b}.groups.shape")
            grouped = [Value(n) for n in self.name(b + "_groups")]
            for x, y, ct in zip(vals, grouped, c, strict=True):
                self.ops.append(Op("Reshape", [x, ct], None, [y]))
            vals = grouped
        out = [Value(n) for n in self.name(b + ("_gathered_groups" if g > 1 else "_gathered"))]
        self.collective("MPIAllgather", vals, {"axis": a + (g > 1)}, out)
        if g == 1:
            return out
        whole = shape[:a] + (shape[a] * tp,) + shape[a + 1:]
        c = self.const(np.array(whole, dtype=np.int64), f"{b}.shape")
        res = [Value(n) for n in self.name(b + "_gathered")]
        for x, y, ct in zip(out, res, c, strict=True):
            self.ops.append(Op("Reshape", [x, ct], None, [y]))
        return res

    def _scale(self, o: Value, vals: list[Value], marks: str) -> list[Value]:
        plan = self.plan
        factor = (plan.nb if "b" in marks else 1) * (plan.tp if "t" in marks else 1)
        if factor == 1:
            return vals
        dtype = plan.prog.type(o).dtype.np
        c = self.const(np.array(1.0 / factor, dtype=dtype), f"{base_name(o)}.scale")
        b = base_name(o)
        out = []
        for x, ln, n, ct in zip(vals, self.name(b + "_local"), self.name(b), c, strict=True):
            x.name = ln
            y = Value(n)
            self.ops.append(Op("Mul", [x, ct], None, [y]))
            out.append(y)
        return out
