"""Sharding analysis: the layout of every value of a sequential function under D and T.

Two passes over the function's def-use graph, both driven by the layout rules:

1. **Batch.** The batch inputs (named by the caller; else the parameters not bound to
   initializers that share the most common first dimension; in a function without
   initializers, the parameters in a data role: ``MatMul``'s first operand, ``Gather``'s
   indices, a loss's target; never an optimizer's weight) are split along axis 0; the
   split flows to every activation and gradient. A batch-free value that an op demands
   split (an expanded mask, indices made from the local batch size) is split at its
   sources (``_pull_batch``). Weight gradients come out partial over the batch (summed
   later). An op that cannot split its batch axis (a softmax over it) makes the function
   impossible to data-parallelize: ``batch_error`` says why, and D or K is refused.
2. **Tensor (Megatron).** In program order, every ``MatMul`` whose second operand is a
   still-whole 2-D weight and whose first operand is not split is a candidate for a
   column-parallel split of that weight. The split is propagated; rules *demand* layouts of
   other weights on the way (the bias of the projection; the weight of the row-parallel
   projection that closes the pair, whose result is partial and gets an allreduce). The
   candidate is kept if every rule accepts and no split activation reaches the results;
   otherwise it is undone and the weight stays whole. A ``Split`` into ``n`` equal parts of
   a column-parallel output (fused QKV) retries the candidate with ``n`` interleaved groups.

Both passes use one worklist loop (``_propagate``) over op indices in program order; the
cost is proportional to the ops each split reaches, not to the function size per candidate.
"""

from __future__ import annotations

import copy
import heapq
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from distir.ir.core import Op, Value
from distir.transforms.batch_inputs import find_batch_inputs
from distir.transforms.layout import B, Demand, Layout, Reject, T, replicated
from distir.transforms.layout_rules import BROADCAST, UNARY, apply_rule
from distir.transforms.layout_shape_rules import reshape_layout
from distir.transforms.program import Program
from distir.transforms.tensor_patterns import candidates, pull_tensor

__all__ = ["Sharding", "OPTIMIZERS"]

OPTIMIZERS = {"SGDOptimizer": (0,), "AdamOptimizer": (0, 2, 3)}
"""Optimizer ops and the inputs that are trained state (weights, moments)."""


_ELEMENTWISE = frozenset(UNARY) | frozenset(BROADCAST)
_RESHAPES = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze"})
_LOCAL_GATHERS = frozenset({"Gather", "GatherND"})
_MAX_SUMS = 256
"""The longest chain of ``Add`` ops summing a gradient that ``_updated_weight`` follows."""


class _Layouts(dict[Value, Layout]):
    """Layouts by value. A value no rule reached (no split input ever flowed into the op that
    makes it) is replicated: ``layouts[v]`` says so without storing it, while ``get`` still
    tells the propagation that nothing reached it."""

    def __init__(self, prog: Program) -> None:
        super().__init__()
        self.prog = prog

    def __missing__(self, v: Value) -> Layout:
        return replicated(len(self.prog.shape(v)))


class Sharding:
    """Layouts (``layout``) and partial-sum marks (``partial``) of the live values of a
    ``Program``; ``batch_size`` is the size of the split batch axis (``None`` if none)."""

    def __init__(self, prog: Program, batch_inputs: Sequence[str] | None = None) -> None:
        self.prog = prog
        self.layout: dict[Value, Layout] = _Layouts(prog)
        self.partial: dict[Value, str] = {}
        self.trained: set[Value] = set()
        self.data: set[Value] = set()
        self.locked: set[Value] = set()
        self.batch_size: int | None = None
        self._memo: dict[tuple, Any] = {}
        self.batch_error: str | None = None
        """Why the batch cannot be split, if it cannot."""
        self._pulled: list[Value] = []
        self._slicing = False
        """Whether the candidate being tried may slice shared weights (``_slice_use``)."""
        self._undo_cur: list[tuple[Value, Any, Any]] | None = None
        """The undo log of the tensor-pass candidate being tried (``_accept_tensor``)."""
        self.local_index: set[Value] = set()
        """Indices into a batch-split tensor made from local shapes (``_accept_batch``)."""
        self.forced: dict[Value, Layout] = {}
        """Batch-free values split because a batch-split value is combined with them (an
        expanded mask): each shard makes its part locally (``_pull_batch``)."""
        self.sliced: dict[tuple[Op, int], Layout] = {}
        """``(op, input index) -> layout``: a whole, untrained weight that one op takes split
        over ``tp`` while its other users take it whole (a bias shared by value with a
        normalization); each rank slices its part before the op (``emit.Emitter``)."""
        self._find_roles(batch_inputs)
        self._batch_pass()
        self._after_batch = (dict(self.layout), dict(self.partial), dict(self.forced))
        """The layouts, partial marks and locally made values after the batch pass: the
        start of every tensor pass (``for_tp``)."""
        self._variants: dict[int, Sharding] = {}
        self._t_sizes: frozenset[tuple[int, int]] | None = None
        self._tensor_pass(None)

    # -- per-tp fallback ---------------------------------------------------------------------
    def for_tp(self, tp: int) -> Sharding:
        """The sharding for ``tp`` ranks: this one when ``tp`` divides every split axis (in
        its interleaved groups), else a sharding whose tensor pass kept only the candidates
        that ``tp`` divides; the others' weights stay whole (replicated). Computed once per
        such ``tp`` and kept. The batch layouts are the same in all of them."""
        if self._t_sizes is None:
            self._t_sizes = frozenset(self._split_sizes(self.layout, self.sliced))
        if all(n % (tp * g) == 0 for n, g in self._t_sizes):
            return self
        got = self._variants.get(tp)
        if got is None:
            got = copy.copy(self)
            lay, part, forced = self._after_batch
            got.layout = _Layouts(self.prog)
            got.layout.update(lay)
            got.partial, got.forced = dict(part), dict(forced)
            got.locked, got.sliced, got._variants = set(), {}, {}
            got._pulled = []
            got._tensor_pass(tp)
            got._t_sizes = frozenset(got._split_sizes(got.layout, got.sliced))
            self._variants[tp] = got
        return got

    def _split_sizes(self, values: Iterable[Value], sliced: dict[tuple[Op, int], Layout],
                     ) -> Iterator[tuple[int, int]]:
        """``(size, groups)`` of the ``"t"`` axis of each of ``values`` that is split over
        the ranks, and of each weight sliced on use."""
        prog, lay = self.prog, self.layout
        for v in values:
            a = lay[v].axis(T)
            if a is not None:
                yield prog.shape(v)[a], lay[v].groups
        for (op, k), s in sliced.items():
            a = s.axis(T)
            x = op.inputs[k]
            if a is not None and x is not None:
                yield prog.shape(x)[a], s.groups

    # -- roles -----------------------------------------------------------------------------
    def _find_roles(self, batch_inputs: Sequence[str] | None) -> None:
        prog = self.prog
        params = prog.fn.params
        for i in prog.live_ops:
            op = prog.ops[i]
            for k in OPTIMIZERS.get(op.op_type, ()):
                v = op.inputs[k]
                if v in prog.param_set:
                    self.trained.add(v)
        bound = set(prog.fn.initializers)
        self.bound = frozenset(p for p in params if p.name in bound)
        chosen, self.batch_size = find_batch_inputs(prog, batch_inputs, self.trained,
                                                    self.bound)
        for p in params:
            rank = len(prog.shape(p))
            if p in chosen:
                self.data.add(p)
                self.layout[p] = Layout((B,) + (None,) * (rank - 1))
            else:
                self.layout[p] = replicated(rank)

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
            except (Demand, Reject) as e:
                hit = e
            self._memo[key] = hit
        if isinstance(hit, Exception):
            raise hit
        if op.op_type in _LOCAL_GATHERS and ins[0] is not None and ins[1] is not None and \
                ins[1].marks and ins[1].marks[0] == B and op.inputs[1] not in self.local_index:
            self._check_gather(op, ins[0])
        elif op.op_type == "ScatterND" and hit[0][1] and not self._zeros(op.inputs[0]):
            raise Reject("ScatterND adds split updates into a tensor that is not zeros")
        return hit

    def _zeros(self, v: Value | None) -> bool:
        """Whether ``v`` is all zeros: a zero constant, or one expanded."""
        prog = self.prog
        c = prog.const(v)
        if c is not None:
            return not np.any(c)
        op = prog.producer_op(v) if v is not None else None
        if op is None:
            return False
        if op.op_type == "Expand":
            return self._zeros(op.inputs[0])
        if op.op_type == "ConstantOfShape":
            val = op.attrs.get("value")
            return val is None or not np.any(val.array)  # type: ignore[union-attr]
        return False

    def _check_gather(self, op: Op, data: Layout) -> None:
        """A gather along the split batch axis needs indices made from local shapes."""
        axis = self.prog.attrs(op).get("axis", 0) if op.op_type == "Gather" else 0
        if data.marks[axis] == B:
            raise Reject(f"{op.op_type} along the split batch axis with indices that are "
                         "not made from the local batch size")

    def _propagate(self, heap: list[int], accept: Callable[[Value, Layout, bool], bool],
                   undo: list[tuple[Value, Any, Any]] | None,
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
                if v is not None and undo is not None and self._slicing and (
                        self._gather_grad(op, undo)
                        or self._slice_use(op, d.index, v, d.layout, undo)):
                    if i not in queued:
                        queued.add(i)
                        heapq.heappush(heap, i)
                    continue
                if v is None or not accept(v, d.layout, d.local):
                    r = Reject(f"input {d.index} (%{v.name if v else '_'}) would have to "
                               f"be split as {d.layout}")
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
                     undo: list[tuple[Value, Any, Any]] | None) -> None:
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

    # -- pass 1: batch ---------------------------------------------------------------------
    def _accept_batch(self, v: Value, layout: Layout, local: bool = False) -> bool:
        """Whether ``v`` may take the batch split ``layout`` that an op demands: a parameter
        that is data (not a weight, of the batch size along the split axis), or a
        batch-free value whose shards each device can make itself (``_pull_batch``).
        ``local``: ``v`` indexes a batch-split tensor, so its shards must be made from
        local shapes (at least one ``Range`` over the local batch)."""
        prog = self.prog
        if T in layout.marks:
            return False
        if v not in prog.param_set:
            n = self._pull_batch(v, layout, 0, local)
            if n is None or (local and n == 0):
                return False
            if local:
                self.local_index.add(v)
            return True
        if local or v in self.trained or v in self.bound:
            return False
        a = layout.axis(B)
        if a is None or prog.shape(v)[a] != self.batch_size:
            return False
        self.data.add(v)
        return True

    def _pull_batch(self, v: Value, want: Layout, depth: int, local: bool) -> int | None:
        """Split the batch-free value ``v`` as ``want`` by splitting what it is made of: an
        ``Expand`` or ``ConstantOfShape`` makes its shard at the local shape (its rows are
        equal along a broadcast axis), a ``Range`` over the batch size (with ``local``)
        counts the local rows; elementwise, reshaping, ``Concat`` and ``Gather`` ops pass
        the split on to their inputs. Returns the number of ``Range`` sources, or ``None``
        when ``v`` cannot be split so. The values split are recorded in ``forced``."""
        prog = self.prog
        cur = self.layout.get(v) or replicated(len(want.marks))
        if cur == want:
            return 0
        if depth > 64 or any(c is not None and c != w
                             for c, w in zip(cur.marks, want.marks, strict=True)):
            return None
        if v in prog.param_set:
            return 0 if not local and self._accept_batch(v, want) else None
        op = prog.producer_op(v)
        if op is None or len(op.outputs) != 1:
            return None
        t = op.op_type
        so = prog.shape(v)
        pulls: list[tuple[Value, Layout]] = []
        found = 0
        if t == "ConstantOfShape":
            pass
        elif t == "Range":
            if not local or want.marks[0] != B or so[0] != self.batch_size or \
                    not self._is_batch_size(op.inputs[1], 0):
                return None
            found = 1
        elif t == "Expand" or t in _ELEMENTWISE:
            for x in (op.inputs[:1] if t == "Expand" else op.inputs):
                if x is None:
                    continue
                sx = prog.shape(x)
                off = len(so) - len(sx)
                marks = tuple(None if sx[j] == 1 else want.marks[j + off]
                              for j in range(len(sx)))
                if any(marks):
                    pulls.append((x, Layout(marks)))
        elif t in _RESHAPES:
            x = op.inputs[0]
            try:
                pulls.append((x, reshape_layout(want, so, prog.shape(x))))  # type: ignore
            except Reject:
                return None
        elif t == "Concat":
            axis = prog.attrs(op).get("axis", 0)
            if want.marks[axis + len(so) if axis < 0 else axis] is not None:
                return None
            pulls.extend((x, want) for x in op.inputs if x is not None)
        elif t == "Gather":
            data, idx = op.inputs
            if data is None or idx is None:
                return None
            axis = prog.attrs(op).get("axis", 0)
            rd, ri = len(prog.shape(data)), len(prog.shape(idx))
            axis = axis + rd if axis < 0 else axis
            if any(want.marks[:axis] + want.marks[axis + ri:]):
                return None
            pulls.append((idx, Layout(want.marks[axis:axis + ri])))
        else:
            return None
        for x, lay in pulls:
            n = self._pull_batch(x, lay, depth + 1, local)
            if n is None:
                return None
            found += n
        self.forced[v] = want
        self.layout[v] = want
        self._pulled.append(v)
        return found

    def _is_batch_size(self, v: Value | None, depth: int) -> bool:
        """Whether ``v`` holds the batch size, read from the shape of a batch-split value
        (``Gather(Shape(x), a)`` with axis ``a`` of ``x`` split): its local value is the
        shard's batch."""
        prog = self.prog
        op = prog.producer_op(v) if v is not None else None
        if op is None or depth > 16:
            return False
        t = op.op_type
        if t in ("Squeeze", "Unsqueeze", "Cast", "Reshape", "Identity"):
            return self._is_batch_size(op.inputs[0], depth + 1)
        shape_op: Op | None = op
        k = 0
        if t == "Gather":
            shape_op = prog.producer_op(op.inputs[0])  # type: ignore[arg-type]
            c = prog.const(op.inputs[1])
            if c is None or np.asarray(c).size != 1:
                return False
            k = int(np.asarray(c).reshape(-1)[0])
        if shape_op is None:
            return False
        if shape_op.op_type != "Shape" or shape_op.inputs[0] is None:
            return False
        x = shape_op.inputs[0]
        rank = len(prog.shape(x))
        a = prog.attrs(shape_op)
        start = int(a.get("start", 0) or 0)
        start = start + rank if start < 0 else start
        k = start + (k + rank - start if k < 0 else k)
        return 0 <= k < rank and self.layout[x].marks[k] == B

    def _batch_pass(self) -> None:
        """Split the batch everywhere. An op that cannot take a split batch is recorded in
        ``batch_error`` (a configuration that splits the batch is then refused) and its
        results are treated as per-sample for the rest of the analysis."""
        prog = self.prog

        def on_reject(op: Op, r: Reject) -> tuple:
            if self.batch_error is None:
                self.batch_error = (f"cannot split the batch over replicas and microbatches: "
                                    f"`{prog.op_text(op)}`: {r.message}")
            return tuple((Layout((B,) + (None,) * (len(prog.shape(v)) - 1))
                          if prog.shape(v) else replicated(0), "") for v in op.outputs)

        self._propagate(list(prog.live_ops), self._accept_batch, None, on_reject)

    # -- pass 2: tensor parallelism ----------------------------------------------------------
    def _accept_tensor(self, v: Value, layout: Layout, local: bool = False) -> bool:
        """Whether ``v`` may take the tensor split ``layout`` that an op demands: a whole
        weight, or an activation whose split is pulled back to the weights it is made of
        (``tensor_patterns.pull_tensor``; those weights are split and recorded for undo)."""
        prog = self.prog
        if v not in prog.param_set:
            if local or self._undo_cur is None:
                return False
            seeds = pull_tensor(self, v, layout)
            if seeds is None:
                return False
            for p, lay in seeds.items():
                if p not in prog.param_set:  # made at its local shape (``forced``)
                    mark: Any = ("forced", p)  # an undo entry of its own kind
                    self._undo_cur.append((mark, self.forced.get(p), None))
                    self.forced[p] = lay
                self._undo_cur.append((p, self.layout.get(p), self.partial.get(p)))
                self.layout[p] = lay
                self._pulled.append(p)
            return True
        if v in self.data or v in self.locked:
            return False
        if any(self.layout[v].marks) or B in layout.marks:
            return False
        return True

    def _slice_use(self, op: Op, k: int, v: Value, layout: Layout,
                   undo: list[tuple[Any, Any, Any]]) -> bool:
        """Let ``op`` take the whole weight ``v`` split as ``layout`` by slicing it locally,
        when ``v`` is shared with ops that take it whole (``sliced``), or is an
        ``Identity`` of such a weight. A trained weight is sliced only where it is shared by
        value, read through such ``Identity`` copies (its optimizer and gradient ops read it
        too, so its users do not tell); it stays whole: the part of its
        gradient that the sliced use gives is split too, and is gathered before it is
        summed with the others or applied (``_gather_grad``); else the candidate fails."""
        prog = self.prog
        src = v
        while src not in prog.param_set:  # an exporter's Identity of a deduplicated weight
            p = prog.producer_op(src)
            if p is None or p.op_type != "Identity" or p.inputs[0] is None:
                return False
            src = p.inputs[0]
        if src in self.data or B in layout.marks or op.op_type in OPTIMIZERS or \
                T not in layout.marks or any(self.layout[v].marks) or \
                len(prog.users.get(src, ())) < 2 and src is v or (op, k) in self.sliced:
            return False
        if src in self.trained and src is v and not any(  # its gradient ops read it too
                prog.ops[u].op_type == "Identity" for u in prog.users.get(src, ())):
            return False
        self.sliced[(op, k)] = layout
        undo.append(((op, k), None, None))
        return True

    def _gather_grad(self, op: Op, undo: list[tuple[Any, Any, Any]]) -> bool:
        """Let ``op`` take its split inputs whole, gathered over the ranks (``sliced`` maps
        them to their layout without ``"t"``), when ``op`` sums parts of the gradient of a
        whole trained weight (the ``Add`` of the parts of its uses, through ``Add``/``Sum``
        to the optimizer) or applies it: a weight sliced on use keeps one value on every
        rank, so its gradient is summed whole, exactly as in the sequential step."""
        prog = self.prog
        w = self._updated_weight(op)
        if w is None:
            return False
        got = False
        for k, x in enumerate(op.inputs):
            if x is None or x is w or (op, k) in self.sliced:
                continue
            lay = self.layout.get(x)
            if lay is None or T not in lay.marks or len(prog.shape(x)) != len(prog.shape(w)):
                continue
            self.sliced[(op, k)] = lay.with_marks(tuple(None if m == T else m
                                                         for m in lay.marks))
            undo.append(((op, k), None, None))
            got = True
        return got

    def _updated_weight(self, op: Op) -> Value | None:
        """The whole trained weight whose gradient ``op`` sums (through ``Add``/``Sum``
        ops, each the only user of the previous) or applies, else ``None``."""
        prog = self.prog
        for _ in range(_MAX_SUMS):
            if op.op_type in OPTIMIZERS:
                w = op.inputs[0]
                ok = w in self.trained and not any(self.layout[w].marks)  # type: ignore
                return w if ok else None
            if op.op_type not in ("Add", "Sum") or len(op.outputs) != 1:
                return None
            us = prog.users.get(op.outputs[0], ())
            if len(us) != 1:
                return None
            nxt = prog.ops[next(iter(us))]
            if nxt.op_type in OPTIMIZERS and nxt.inputs[1] is not op.outputs[0]:
                return None
            op = nxt
        return None

    def _tensor_pass(self, tp: int | None) -> None:
        """Try every candidate in program order; with ``tp``, keep only those whose split
        axes ``tp`` divides (the per-pattern fallback of ``for_tp``)."""
        prog = self.prog
        tried: set[Value] = set()
        for i in prog.live_ops:
            cand = candidates(self, i)
            if cand is None:
                continue
            w, seed = cand
            if w in tried or w in self.data or w in self.locked or any(self.layout[w].marks):
                continue
            tried.add(w)
            groups = 1
            self._slicing = False  # shared weights split whole first, else sliced on use
            while True:
                undo: list[tuple[Value, Any, Any]] = [(w, self.layout[w], None)]
                self._undo_cur = undo
                self.layout[w] = Layout(seed.marks, groups)
                bad = self._propagate(list(prog.users[w]), self._accept_tensor, undo)
                self._undo_cur = None
                if bad is None and self._closed(undo) and self._divides(undo, tp):
                    self.locked.update(v for v, _, _ in undo if v in prog.param_set)
                    break
                self._undo(undo)
                if bad is not None and bad[1].groups and groups == 1:
                    groups = bad[1].groups
                    continue
                if not self._slicing:
                    self._slicing = True
                    continue
                break
            self._slicing = False

    def _divides(self, undo: list[tuple[Any, Any, Any]], tp: int | None) -> bool:
        """Whether ``tp`` divides every axis the candidate of ``undo`` splits (always, with
        no ``tp``: the analysis for every degree)."""
        if tp is None:
            return True
        sliced = {k: self.sliced[k] for k, _, _ in undo
                  if isinstance(k, tuple) and isinstance(k[0], Op) and k in self.sliced}
        vals = (v for v, _, _ in undo if isinstance(v, Value))
        return all(n % (tp * g) == 0 for n, g in self._split_sizes(vals, sliced))

    def _closed(self, undo: list[tuple[Value, Any, Any]]) -> bool:
        """Whether no activation split over ``tp`` reaches the function's results."""
        prog = self.prog
        for v, _, _ in undo:
            if v in prog.returned and T in self.layout[v].marks:
                op = prog.producer_op(v)
                if op is None or op.op_type not in OPTIMIZERS:
                    return False
        return True

    def _undo(self, undo: list[tuple[Value, Any, Any]]) -> None:
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
