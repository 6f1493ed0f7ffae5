"""Op rules on a mesh: the output placements of an op from its inputs' placements.

Reuses the layout rules of the D/T/P transform (``LAYOUT_RULES``) one mesh axis at a time:
on axis ``a``, ``Shard(d)`` is the ``"t"`` mark on dimension ``d``, ``Replicate`` no mark,
and a result that a rule calls partial over ``"t"`` is ``Partial``. A rule's ``Reject`` or
``Demand`` becomes ``NotLocal`` (with the demanded placement, if any). ``Partial`` inputs,
which the layout rules do not take, follow a small linearity table: ``Add(P, P) = P``,
``MatMul(P, R) = P``, ``ReluGrad(x, P) = P`` (for ``x`` replicated on that axis), and so on.
Results are memoized per (op, input specs) and per (op form, input specs) on the
``OpRules`` object (the ops of repeated layers share them); ``OpRules.of`` keeps
one per program and mesh shape, so propagation, the assignment's check and every
configuration on a mesh of that shape share the memo.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from distir.ir.core import Op
from distir.transforms.layout import B, Demand, Layout, Reject, T, replicated
from distir.transforms.layout_rules import MEAN_SCALED, apply_rule, mean_scale_marks
from distir.transforms.program import Program
from distir.transforms.spmd.aligned import LOOKUPS, aligned_dim, result_dim
from distir.transforms.spmd.mesh import (
    Mesh,
    P,
    Partial,
    Placement,
    R,
    Replicate,
    Shard,
    Spec,
    check_spec,
)
from distir.transforms.spmd.vocab import accepts as accepts_vocab

__all__ = ["OpRules", "NotLocal", "Outcome", "LINEAR_ALL", "LINEAR_FIRST", "LINEAR_ONE"]

LINEAR_ALL = frozenset({"Add", "Sub", "Sum", "Concat"})
"""Ops linear in all their inputs jointly: every input ``Partial`` gives a ``Partial``."""
LINEAR_FIRST = frozenset({"Identity", "Neg", "Reshape", "Transpose", "Flatten", "Squeeze",
                          "Unsqueeze", "ReduceSum", "Split", "Slice", "Expand"})
"""Ops linear in input 0 (their other inputs are shapes, axes or bounds)."""
LINEAR_ONE: dict[str, tuple[int, ...]] = {
    "MatMul": (0, 1), "Mul": (0, 1), "Div": (0,), "ReluGrad": (1,), "GeluGrad": (1,),
    "MatMulGrad": (2,),
}
"""Ops linear in any one of the listed inputs when the others are replicated."""

_XENT = frozenset({"SoftmaxCrossEntropyLoss", "SoftmaxCrossEntropyLossGrad"})


class NotLocal(Exception):
    """The op cannot run locally on these input placements. ``demand`` is
    ``(input index, mesh axis, placement)`` when a rule says which input placement would
    make it local (the bias of a column-parallel product). ``groups`` is the number of
    interleaved groups a split input would need (a ``Split`` into ``g`` equal parts along
    the split axis runs locally on ``Shard(d, groups=g)``)."""

    def __init__(self, message: str, demand: tuple[int, int, Placement] | None = None,
                 axis: int | None = None, groups: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.demand = demand
        self.axis = axis
        self.groups = groups


@dataclass(frozen=True, slots=True)
class Outcome:
    """The result specs of one op, and per result the mesh axes over which it is a mean
    computed on each device's shard alone (the lowering scales it by ``1/axis size``)."""

    outs: tuple[Spec, ...]
    scaled: tuple[tuple[int, ...], ...]


class OpRules:
    """Rules of one sequential program's ops on one mesh, memoized."""

    def __init__(self, prog: Program, mesh: Mesh) -> None:
        self.prog = prog
        self.mesh = mesh
        self._memo: dict[tuple[Any, tuple[Spec | None, ...]], Outcome | NotLocal] = {}
        self._forms: dict[Op, tuple] = {}

    @staticmethod
    def of(prog: Program, mesh: Mesh) -> OpRules:
        """The rules of ``prog`` on meshes of ``mesh``'s shape (they read no device), one
        memo per program and shape (kept in ``prog.derived``)."""
        key = ("spmd.OpRules", mesh.shape)
        got = prog.derived.get(key)
        if got is None:
            got = prog.derived[key] = OpRules(prog, mesh)
        return got  # type: ignore[no-any-return]

    def apply(self, op: Op, ins: tuple[Spec | None, ...]) -> Outcome:
        """The ``Outcome`` of ``op`` on input specs ``ins`` (``None`` for an omitted input
        or a shape operand, which every device holds whole); raises ``NotLocal``."""
        key = (op, ins)
        hit = self._memo.get(key)
        if hit is None:
            form = (self._form(op), ins)  # a repeated layer's ops share their outcomes
            hit = self._memo.get(form)
            if hit is None:
                try:
                    hit = self._apply(op, ins)
                except NotLocal as e:
                    hit = e
                self._memo[form] = hit
            self._memo[key] = hit
        if isinstance(hit, NotLocal):
            raise hit
        return hit

    def _form(self, op: Op) -> tuple:
        """All that ``_apply`` reads of ``op`` besides the input specs: its type,
        attributes, input and result shapes, its inputs' known values (small ones by
        value, others by identity; a lookup's indices by identity also where the type
        propagator did not keep them: ``Program.known`` may compute them) and, for a
        ``ScatterND``, whether it adds into zeros."""
        got = self._forms.get(op)
        if got is None:
            prog = self.prog
            known: list[Any] = []
            for k, v in enumerate(op.inputs):
                c = prog.const(v)
                c = None if c is None else np.asarray(c)
                if c is None:  # a lookup's indices may be known though not kept
                    known.append(id(v) if k == 1 and op.op_type in LOOKUPS else None)
                else:
                    known.append((c.dtype.str, c.shape, c.tobytes()) if c.size <= 64 else id(v))
            got = self._forms[op] = (
                op.op_type, op.attrs_key,
                tuple(None if v is None else prog.shape(v) for v in op.inputs),
                tuple(prog.shape(o) for o in op.outputs), tuple(known),
                op.op_type == "ScatterND" and prog.is_zeros(op.inputs[0]))
        return got

    def _apply(self, op: Op, ins: tuple[Spec | None, ...]) -> Outcome:
        prog, mesh = self.prog, self.mesh
        shapes = tuple(None if v is None else prog.shape(v) for v in op.inputs)
        outs = tuple(prog.shape(o) for o in op.outputs)
        attrs = prog.attrs(op)
        per_axis: list[tuple[Placement, ...]] = []
        scaled: list[list[int]] = [[] for _ in outs]
        for a in range(mesh.ndim):
            res, scale = self._axis(op, [None if s is None else s[a] for s in ins], shapes,
                                    outs, attrs, a)
            per_axis.append(res)
            for k in scale:
                scaled[k].append(a)
        specs = tuple(tuple(per_axis[a][k] for a in range(mesh.ndim)) for k in range(len(outs)))
        for k, (s, shp) in enumerate(zip(specs, outs, strict=True)):
            why = check_spec(shp, s, mesh)
            if why is not None:
                raise NotLocal(f"result {k} of {op.op_type} cannot be placed {why}")
        return Outcome(specs, tuple(tuple(x) for x in scaled))

    def _axis(self, op: Op, pl: list[Placement | None], shapes: tuple, outs: tuple,
              attrs: dict[str, Any], axis: int) -> tuple[tuple[Placement, ...], list[int]]:
        t = op.op_type
        partial = [i for i, p in enumerate(pl) if isinstance(p, Partial)]
        if partial:
            self._check_linear(t, pl, partial, axis)
            lays = tuple(None if s is None else replicated(len(s)) for s in shapes)
            try:
                res = apply_rule(t, lays, shapes, outs, attrs, self._const(op))
            except (Reject, Demand) as e:
                raise NotLocal(f"{t}: {e}", axis=axis) from None
            return tuple(P for _ in res), []
        if t == "ScatterND" and _adds_split_rows_into_zeros(self.prog, op, pl, shapes, attrs):
            # each device adds its own rows into its zeros: the sum over devices is the
            # whole result (an embedding's gradient under a split batch, as dtp does)
            return (P,), []
        if isinstance(pl[0], Shard) and t == "ScatterND":
            k = aligned_dim(self.prog, op, pl[0], self.mesh.shape[axis])
            if k is not None and pl[1] == pl[2] == Shard(k):  # each device's own rows
                return (pl[0],), []
            if k is not None and pl[1] in (R, Shard(k)) and pl[2] in (R, Shard(k)):
                j = 1 if pl[1] == R else 2
                raise NotLocal(f"{t}: indices and updates aligned with the data's blocks when "
                               f"split along {k}", (j, axis, Shard(k)), axis)
        elif isinstance(pl[0], Shard) and t in LOOKUPS:
            k = aligned_dim(self.prog, op, pl[0], self.mesh.shape[axis])
            if k is not None and pl[1] == Shard(k):  # known indices in each device's rows
                return (Shard(result_dim(self.prog, op, k)),), []
            if k is not None and isinstance(pl[1], Replicate):
                raise NotLocal(f"{t}: indices aligned with the data's blocks when split "
                               f"along {k}", (1, axis, Shard(k)), axis)
        vocab = accepts_vocab(t, pl, shapes, attrs)
        if not vocab and t in _XENT and isinstance(pl[0], Shard) and \
                pl[0].dim == len(shapes[0]) - 1:
            # the class-split cross entropy is written with its own collectives (``vocab``)
            # only on whole labels; a plain local op on split logits would be wrong
            raise NotLocal(f"{t}: logits split on the class axis", axis=axis)
        if not vocab and isinstance(pl[0], Shard) and \
                pl[0].dim in _indexed_dims(t, shapes, attrs):
            # a lookup in (or a scatter into) a row-split table is written with ids shifted
            # to local rows and masked (``vocab``) only on whole ids; a plain local op would
            # index the local rows with global ids
            raise NotLocal(f"{t}: data split along an indexed axis", axis=axis)
        lays = tuple(None if s is None else replicated(len(s)) if p is None
                     else _layout(p, len(s)) for p, s in zip(pl, shapes, strict=True))
        try:
            res = apply_rule(t, lays, shapes, outs, attrs, self._const(op))
        except Reject as e:
            raise NotLocal(f"{t}: {e.message}", axis=axis, groups=e.groups) from None
        except Demand as e:
            want = _placement(e.layout)
            raise NotLocal(f"{t}: input {e.index} needs {e.layout}",
                           None if want is None else (e.index, axis, want), axis) from None
        places: list[Placement] = []
        for lay, part in res:
            if lay.marks.count(T) > 1 or any(m is not None and m != T for m in lay.marks):
                raise NotLocal(f"{t}: a result split twice on one axis", axis=axis)
            if part:
                if T in lay.marks:
                    raise NotLocal(f"{t}: a result both split and partial", axis=axis)
                places.append(P)
            else:
                places.append(_placement(lay) or R)
        return tuple(places), self._scaled(t, attrs, lays, places)

    @staticmethod
    def _check_linear(t: str, pl: list[Placement | None], partial: list[int],
                      axis: int) -> None:
        if t in LINEAR_ALL:
            if any(not isinstance(p, Partial) for p in pl if p is not None):
                raise NotLocal(f"{t} of a partial and a non-partial input", axis=axis)
            return
        lin = (0,) if t in LINEAR_FIRST else LINEAR_ONE.get(t, ())
        if len(partial) != 1 or partial[0] not in lin:
            raise NotLocal(f"{t} is not linear in input(s) {partial}", axis=axis)
        if any(not isinstance(p, Replicate) for i, p in enumerate(pl)
               if p is not None and i != partial[0]):
            raise NotLocal(f"{t}: a partial input beside a split one", axis=axis)

    def _const(self, op: Op) -> Any:
        prog = self.prog
        return lambda i: prog.const(op.inputs[i]) if i < len(op.inputs) else None

    @staticmethod
    def _scaled(t: str, attrs: dict[str, Any], lays: tuple,
                places: list[Placement]) -> list[int]:
        """Results that are means over this axis's shards."""
        if t not in MEAN_SCALED:
            return []
        bl = tuple(None if lay is None else Layout(tuple(B if m == T else m for m in lay.marks))
                   for lay in lays)
        out = []
        for k, p in enumerate(places):
            part = B if isinstance(p, Partial) else ""
            if t in _XENT:  # a mean over the split labels (a class split sums whole rows)
                hit = k == 0 and T in lays[1].marks and attrs.get("reduction") == "mean"
            else:
                hit = bool(mean_scale_marks(t, attrs, bl, k, part))
            if hit:
                out.append(k)
        return out


def _adds_split_rows_into_zeros(prog: Program, op: Op, pl: list[Placement | None],
                                shapes: tuple, attrs: dict[str, Any]) -> bool:
    """A ``ScatterND`` with ``reduction="add"`` of updates and indices split alike along a
    leading (sample) axis into whole zeros."""
    if attrs.get("reduction") != "add" or len(pl) != 3 or isinstance(pl[0], Shard):
        return False
    idx, upd = pl[1], pl[2]
    if not (isinstance(idx, Shard) and isinstance(upd, Shard)) or idx != upd or \
            idx.groups != 1 or idx.dim >= len(shapes[1]) - 1:
        return False
    return prog.is_zeros(op.inputs[0])


def _layout(p: Placement, rank: int) -> Layout:
    if isinstance(p, Shard):
        marks: list[str | None] = [None] * rank
        marks[p.dim] = T
        return Layout(tuple(marks), p.groups)
    return replicated(rank)


def _placement(lay: Layout) -> Placement | None:
    """``Shard``/``Replicate`` of a one-mark layout, ``None`` if it has other marks."""
    if lay.marks.count(T) > 1 or any(m is not None and m != T for m in lay.marks):
        return None
    if T in lay.marks:
        return Shard(lay.marks.index(T), lay.groups)
    return R


def _indexed_dims(op_type: str, shapes: tuple, attrs: dict[str, Any]) -> range:
    """The axes of input 0 that an indexing op addresses with run-time indices (``Gather``
    and ``GatherElements`` along ``axis``; ``GatherND`` and ``ScatterND`` along the leading
    axes the index tuples name); empty for other ops."""
    if op_type not in _INDEXING or not shapes or shapes[0] is None:
        return range(0)
    rank = len(shapes[0])
    if op_type in ("Gather", "GatherElements"):
        a = int(attrs.get("axis", 0) or 0) % max(rank, 1)
        return range(a, a + 1)
    if len(shapes) < 2 or shapes[1] is None or not shapes[1]:
        return range(0)
    depth = int(shapes[1][-1])
    batch = int(attrs.get("batch_dims", 0) or 0)
    return range(batch, batch + depth)


_INDEXING = frozenset({"Gather", "GatherElements", "GatherND", "ScatterND"})
