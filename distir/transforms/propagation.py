"""The worklist loop that propagates layouts through a program by the layout rules.

``Propagation`` holds the state that the batch and tensor passes share (layouts, partial
marks, locally made values, weights sliced on use) and re-evaluates ops in program order
until their results' layouts settle (``_propagate``). A rule may *demand* a layout of an
input; ``accept`` decides whether it may take it, and every change is logged in an undo
list when one is given, so that a tensor-pass candidate can be taken back (``_undo``).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

import numpy as np

from distir.ir.core import Op, Value
from distir.transforms.layout import B, Demand, Layout, Reject, replicated
from distir.transforms.layout_rules import apply_rule
from distir.transforms.program import Program, in_own_blocks

__all__ = ["Propagation", "OPTIMIZERS", "Undo"]

OPTIMIZERS = {"SGDOptimizer": (0,), "AdamOptimizer": (0, 2, 3)}
"""Optimizer ops and the inputs that are trained state (weights, moments)."""

Undo = list[tuple[Any, Any, Any]]
"""An undo log: ``(value, old layout, old partial)``, ``(("forced", value), old, None)``
or ``((op, input index), None, None)`` (a sliced use), in the order of the changes."""

_LOCAL_GATHERS = frozenset({"Gather", "GatherND"})
_PARTIALS = frozenset({"", "b", "t", "bt"})
"""Partial marks as the passes keep them: the kinds of shards a value is summed over."""


class _Layouts(dict[Value, Layout]):
    """Layouts by value. A value no rule reached (no split input ever flowed into the op that
    makes it) is replicated: ``layouts[v]`` says so without storing it, while ``get`` still
    tells the propagation that nothing reached it."""

    def __init__(self, prog: Program) -> None:
        super().__init__()
        self.prog = prog

    def __missing__(self, v: Value) -> Layout:
        return replicated(len(self.prog.shape(v)))


class Propagation:
    """Layouts (``layout``) and partial-sum marks (``partial``) of the live values of a
    ``Program``, and the loop that propagates them."""

    def __init__(self, prog: Program) -> None:
        self.prog = prog
        self.layout: dict[Value, Layout] = _Layouts(prog)
        self.partial: dict[Value, str] = {}
        self.trained: set[Value] = set()
        self.data: set[Value] = set()
        self._memo: dict[tuple, Any] = {}
        self._pulled: list[Value] = []
        self.local_index: set[Value] = set()
        """Indices into a batch-split tensor made from local shapes (``_accept_batch``)."""
        self.forced: dict[Value, Layout] = {}
        """Batch-free values split because a batch-split value is combined with them (an
        expanded mask): each shard makes its part locally (``_pull_batch``)."""
        self.sliced: dict[tuple[Op, int], Layout] = {}
        """``(op, input index) -> layout``: how ``op`` takes an input unlike its layout. A
        whole weight that one op takes split over ``tp`` while its other users take it
        whole (a bias shared by value with a normalization): each rank slices its part
        before the op; or a split gradient that ``op`` takes whole: gathered over the
        ranks (``emit.Emitter``)."""

    def _reshard(self, op: Op, k: int, v: Value, layout: Layout, undo: Undo) -> bool:
        """Whether ``op`` may take its input ``k`` (``v``) as ``layout`` by resharding it
        locally (recorded in ``sliced`` and ``undo``) rather than changing ``v``."""
        return False

    # -- the worklist loop -----------------------------------------------------------------
    def _eval(self, op: Op) -> tuple:
        """The rule's result for ``op`` on the current layouts, memoized: the repeated
        layers of a model give the rules equal arguments (layouts, abstract values of the
        inputs, attributes), so each distinct application runs once."""
        prog = self.prog
        lay = self.layout
        env = prog.env
        ins = tuple(None if v is None else lay.get(v) for v in op.inputs)
        if self.sliced:
            ins = tuple(self.sliced.get((op, k), x) for k, x in enumerate(ins))
        key = (op.op_type, op.attrs_key, ins,
               tuple(None if v is None else env[v] for v in op.inputs))
        hit = self._memo.get(key)
        if hit is None:
            shapes = tuple(None if v is None else prog.shape(v) for v in op.inputs)
            full = tuple(x if x is not None or s is None else replicated(len(s))
                         for x, s in zip(ins, shapes, strict=True))
            outs = tuple(prog.shape(v) for v in op.outputs)
            try:
                hit = apply_rule(op.op_type, full, shapes, outs, prog.attrs(op),
                                 lambda i: prog.const(op.inputs[i]))
                if any(p not in _PARTIALS for _, p in hit):  # a sum over "b*N" or "btH"
                    hit = tuple((lay, "".join(sorted({c for c in p if c in "bt"})))
                                for lay, p in hit)
            except (Demand, Reject) as e:
                hit = e
            self._memo[key] = hit
        if isinstance(hit, Exception):
            raise hit
        if op.op_type in _LOCAL_GATHERS and ins[0] is not None and ins[1] is not None and \
                ins[1].marks and ins[1].marks[0] == B and op.inputs[1] not in self.local_index:
            self._check_gather(op, ins[0])
        elif op.op_type == "ScatterND":
            self._check_scatter(op, ins, hit)
        return hit

    def _made_locally(self, v: Value | None) -> bool:
        """Whether ``v`` is computed (through any ops) from an index made from local shapes
        (``local_index``): its values then address a shard's own rows, whatever arithmetic
        follows (an offset, a fix-up of negative indices)."""
        local = self.local_index
        return self.prog.derived_from(v, lambda x, _: x in local)

    def _rows_of_samples(self, op: Op) -> bool:
        """Whether the one-element index tuples of the ``ScatterND`` ``op``, known before
        running, send sample ``s`` (the updates' leading axis) into rows ``[s·L, (s+1)·L)``
        of ``data``'s first axis, ``L`` its rows per sample: then a split of the samples
        splits the rows alike, and each shard's local indices address its own rows."""
        prog = self.prog
        data, idx, upd = op.inputs[0], op.inputs[1], op.inputs[2]
        if data is None or idx is None or upd is None:
            return False
        rows, samples = prog.shape(data)[0], prog.shape(upd)[0]
        known = prog.known(idx)
        if known is None or known.shape[:1] != (samples,):
            return False
        return in_own_blocks(np.where(known < 0, known + rows, known), rows, samples)

    def _check_scatter(self, op: Op, ins: tuple, hit: tuple) -> None:
        """A ``ScatterND`` of one-element index tuples split by the batch is local into
        ``data`` split along that axis when the indices are made from local shapes (the
        gradient of a gather from a flattened batch: an exported ``as_strided``): it then
        demands that split of ``data``; otherwise split updates add into zeros (partial)."""
        prog = self.prog
        data, idx = ins[0], ins[1]
        tuples = prog.shape(op.inputs[1])[-1] if op.inputs[1] is not None else 0
        made_locally = idx is not None and B in idx.marks and self._made_locally(op.inputs[1])
        local = made_locally and tuples == 1 and idx is not None and idx.marks[0] == B
        if data is not None and data.marks and data.marks[0] == B and tuples == 1:
            if not local or not self._rows_of_samples(op):
                raise Reject("ScatterND into the split batch axis with indices that are not "
                             "made from the local batch size, each sample's into its rows")
            return
        if not hit[0][1]:
            return
        if local and hit[0][1] == "b" and op.inputs[0] is not None and \
                self._rows_of_samples(op):
            raise Demand(0, Layout((B,) + (None,) * (len(prog.shape(op.inputs[0])) - 1)))
        if made_locally:
            # a shard's indices address its own rows, not the whole tensor's: not a sum
            raise Reject("ScatterND with indices made from the local batch size into a "
                         "tensor not split by the batch")
        if not prog.is_zeros(op.inputs[0]):
            raise Reject("ScatterND adds split updates into a tensor that is not zeros")

    def _check_gather(self, op: Op, data: Layout) -> None:
        """A gather along the split batch axis needs indices made from local shapes."""
        axis = self.prog.attrs(op).get("axis", 0) if op.op_type == "Gather" else 0
        if data.marks[axis] == B:
            raise Reject(f"{op.op_type} along the split batch axis with indices that are "
                         "not made from the local batch size")

    def _propagate(self, heap: list[int], accept: Callable[[Value, Layout, bool | None], bool],
                   undo: Undo | None,
                   on_reject: Callable[[Op, Reject], tuple | None] | None = None,
                   ) -> tuple[Op, Reject] | None:
        """Re-evaluate the ops in ``heap`` (and those their changes reach) in program order.
        Returns the first op that rejected its layouts, with the reason, or ``None``;
        ``on_reject`` may instead supply results for the rejecting op and go on."""
        prog = self.prog
        users = prog.users
        queued = set(heap)
        heapq.heapify(heap)
        lay, part = self.layout, self.partial
        while heap:
            i = heapq.heappop(heap)
            queued.discard(i)
            op = prog.ops[i]
            try:
                res = self._eval(op)
            except Demand as d:
                v = op.inputs[d.index]
                if v is not None and undo is not None and \
                        self._reshard(op, d.index, v, d.layout, undo):
                    if i not in queued:
                        queued.add(i)
                        heapq.heappush(heap, i)
                    continue
                if v is None or not accept(v, d.layout, d.local):
                    r = Reject(f"input {d.index} ({prog.value_text(v) if v else '_'}) would "
                               f"have to be split as {d.layout}")
                    alt = on_reject(op, r) if on_reject is not None else None
                    if alt is None:
                        return op, r
                    self._set_outputs(op, alt, heap, queued, undo)
                    continue
                if undo is not None:
                    undo.append((v, lay.get(v), part.get(v)))
                lay[v] = d.layout
                for x in (v, *self._pulled):
                    for u in users.get(x, ()):
                        if u not in queued:
                            queued.add(u)
                            heapq.heappush(heap, u)
                self._pulled.clear()
                if i not in queued:
                    queued.add(i)
                    heapq.heappush(heap, i)
                continue
            except Reject as r:
                alt = on_reject(op, r) if on_reject is not None else None
                if alt is None:
                    return op, r
                res = alt
            self._set_outputs(op, res, heap, queued, undo)
        return None

    def _set_outputs(self, op: Op, res: tuple, heap: list[int], queued: set[int],
                     undo: Undo | None) -> None:
        lay, part, users = self.layout, self.partial, self.prog.users
        forced = self.forced
        for v, (new, p) in zip(op.outputs, res, strict=True):
                f = forced.get(v)
                if f is not None and f != new:
                    new = Layout(tuple(m or x for m, x in zip(new.marks, f.marks, strict=True)),
                                 new.groups)
                if lay.get(v) == new and part.get(v, "") == p:
                    continue
                if undo is not None:
                    undo.append((v, lay.get(v), part.get(v)))
                lay[v] = new
                if p:
                    part[v] = p
                else:
                    part.pop(v, None)
                for u in users.get(v, ()):
                    if u not in queued:
                        queued.add(u)
                        heapq.heappush(heap, u)

    def _undo(self, undo: Undo) -> None:
        for v, old, p in reversed(undo):
            if isinstance(v, tuple):
                if v[0] == "forced":  # a value made at its local shape (``pull_tensor``)
                    if old is None:
                        self.forced.pop(v[1], None)
                    else:
                        self.forced[v[1]] = old
                else:  # a sliced use (``_slice_use``)
                    self.sliced.pop(v, None)
                continue
            if old is None:
                self.layout.pop(v, None)
            else:
                self.layout[v] = old
            if p:
                self.partial[v] = p
            else:
                self.partial.pop(v, None)
