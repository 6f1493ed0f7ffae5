"""Sharding analysis: the layout of every value of a sequential function under D and T.

Two passes over the function's def-use graph, both driven by the layout rules:

1. **Batch.** The batch inputs (parameters in a data role: ``MatMul``'s first operand,
   ``Gather``'s indices, a loss's target; never an optimizer's weight) are split along axis
   0; the split flows to every activation and gradient. Weight gradients come out partial
   over the batch (summed later). An op that cannot split its batch axis (a softmax over
   it) makes the function impossible to data-parallelize, which is an error.
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

import heapq
from collections.abc import Callable
from typing import Any

from distir.errors import TransformError
from distir.ir.core import Op, Value
from distir.transforms.layout import B, Demand, Layout, Reject, T, replicated
from distir.transforms.layout_rules import apply_rule
from distir.transforms.program import Program

__all__ = ["Sharding", "OPTIMIZERS"]

OPTIMIZERS = {"SGDOptimizer": (0,), "AdamOptimizer": (0, 2, 3)}
"""Optimizer ops and the inputs that are trained state (weights, moments)."""

_DATA_ROLES = {("MatMul", 0), ("MatMulGrad", 0), ("Gemm", 0), ("Conv", 0), ("Gather", 1),
               ("MSELoss", 1), ("MSELossGrad", 1), ("SoftmaxCrossEntropyLoss", 1),
               ("SoftmaxCrossEntropyLossGrad", 1)}


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

    def __init__(self, prog: Program) -> None:
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
        self._find_roles()
        self._batch_pass()
        self._tensor_pass()

    # -- roles -----------------------------------------------------------------------------
    def _find_roles(self) -> None:
        prog = self.prog
        params = set(prog.fn.params)
        roles: set[Value] = set()
        for i in prog.live_ops:
            op = prog.ops[i]
            for k in OPTIMIZERS.get(op.op_type, ()):
                v = op.inputs[k]
                if v in params:
                    self.trained.add(v)
            for k, v in enumerate(op.inputs):
                if v is not None and (op.op_type, k) in _DATA_ROLES and v in params:
                    roles.add(v)
        sizes: dict[int, Value] = {}
        for p in prog.fn.params:
            if p in roles and p not in self.trained and len(prog.shape(p)) >= 1:
                sizes.setdefault(prog.shape(p)[0], p)
        big = {n: p for n, p in sizes.items() if n > 1}
        if len(big) > 1:
            (n1, p1), (n2, p2) = list(big.items())[:2]
            raise TransformError(f"cannot tell the batch size: the batch inputs %{p1.name} and "
                                 f"%{p2.name} have first dimensions {n1} and {n2}")
        if sizes:
            self.batch_size = next(iter(big)) if big else 1
        for p in prog.fn.params:
            rank = len(prog.shape(p))
            if p in roles and p not in self.trained and rank >= 1 and \
                    prog.shape(p)[0] == self.batch_size:
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
        return hit

    def _propagate(self, heap: list[int], accept: Callable[[Value, Layout], bool],
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
                if v is None or not accept(v, d.layout):
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
                for u in users.get(v, ()):
                    if u not in queued:
                        queued.add(u)
                        heapq.heappush(heap, u)
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
        for v, (new, p) in zip(op.outputs, res, strict=True):
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
    def _accept_batch(self, v: Value, layout: Layout) -> bool:
        prog = self.prog
        if v not in prog.param_set or v in self.trained or T in layout.marks:
            return False
        a = layout.axis(B)
        if a is None or prog.shape(v)[a] != self.batch_size:
            return False
        self.data.add(v)
        return True

    def _batch_pass(self) -> None:
        """Split the batch everywhere. An op that cannot take a split batch is recorded in
        ``batch_error`` (a configuration that splits the batch is then refused) and its
        results are treated as per-sample for the rest of the analysis."""
        prog = self.prog

        def on_reject(op: Op, r: Reject) -> tuple:
            if self.batch_error is None:
                from distir.ir.printer import format_op

                self.batch_error = (f"cannot split the batch over replicas and microbatches: "
                                    f"`{format_op(op)}`: {r.message}")
            return tuple((Layout((B,) + (None,) * (len(prog.shape(v)) - 1))
                          if prog.shape(v) else replicated(0), "") for v in op.outputs)

        self._propagate(list(prog.live_ops), self._accept_batch, None, on_reject)

    # -- pass 2: tensor parallelism ----------------------------------------------------------
    def _accept_tensor(self, v: Value, layout: Layout) -> bool:
        prog = self.prog
        if v not in prog.param_set or v in self.data or v in self.locked:
            return False
        if any(self.layout[v].marks) or B in layout.marks:
            return False
        return True

    def _tensor_pass(self) -> None:
        prog = self.prog
        tried: set[Value] = set()
        for i in prog.live_ops:
            op = prog.ops[i]
            if op.op_type != "MatMul":
                continue
            x, w = op.inputs
            if w is None or x is None or w not in prog.param_set or w in tried or \
                    w in self.data or w in self.locked or len(prog.shape(w)) != 2 or \
                    any(self.layout[w].marks) or T in self.layout[x].marks:
                continue
            tried.add(w)
            groups = 1
            while True:
                undo: list[tuple[Value, Any, Any]] = [(w, self.layout[w], None)]
                self.layout[w] = Layout((None, T), groups)
                bad = self._propagate(list(prog.users[w]), self._accept_tensor, undo)
                if bad is None and self._closed(undo):
                    self.locked.update(v for v, _, _ in undo if v in prog.param_set)
                    break
                self._undo(undo)
                if bad is not None and bad[1].groups and groups == 1:
                    groups = bad[1].groups
                    continue
                break

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
            if old is None:
                self.layout.pop(v, None)
            else:
                self.layout[v] = old
            if p:
                self.partial[v] = p
            else:
                self.partial.pop(v, None)
