"""The tensor pass: Megatron-style splits of a sequential function's weights over ``tp``
ranks, found by pattern (``tensor_patterns``) and checked by the layout rules.

In program order, every candidate weight (``tensor_patterns.candidates``: a ``MatMul``'s or
``Gemm``'s second operand, a ``Conv``'s weight) is split column-parallel and the split
propagated; rules *demand* layouts of other weights on the way (the bias of the projection;
the weight of the row-parallel projection that closes the pair, whose result is partial and
gets an allreduce; the weights an activation is made of, ``pull_tensor``). The candidate is
kept if every rule accepts, no split activation reaches the results and (with a given
``tp``) ``tp`` divides every axis it splits; otherwise it is undone and its weights stay
whole. A ``Split`` into ``n`` equal parts of a column-parallel output (fused QKV) retries
the candidate with ``n`` interleaved groups; a shared weight that fails whole is retried
sliced on use (``_slice_use``, with the gradient of a trained one gathered,
``_gather_grad``).

``for_tp`` gives the per-``tp`` fallback: the analysis itself when ``tp`` divides every
split axis, else a second tensor pass over the same batch layouts that keeps only the
candidates ``tp`` divides.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator
from typing import Any, Self

from distir.ir.core import Op, Value
from distir.transforms.layout import B, Layout, T, bt_heads, t_axis
from distir.transforms.propagation import OPTIMIZERS, Propagation, Undo, _Layouts
from distir.transforms.tensor_patterns import candidates, pull_tensor

__all__ = ["TensorPass"]

_MAX_SUMS = 256
"""The longest chain of ``Add`` ops summing a gradient that ``_updated_weight`` follows."""


class TensorPass(Propagation):
    """The tensor-parallel layouts of a ``Propagation`` whose batch layouts are set
    (``_after_batch``); ``locked`` holds the weights of the kept candidates."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.locked: set[Value] = set()
        self._slicing = False
        """Whether the candidate being tried may slice shared weights (``_slice_use``)."""
        self._undo_cur: Undo | None = None
        """The undo log of the tensor-pass candidate being tried (``_accept_tensor``)."""
        self._after_batch: tuple[dict, dict, dict] = ({}, {}, {})
        """The layouts, partial marks and locally made values after the batch pass: the
        start of every tensor pass (``for_tp``)."""
        self._variants: dict[int, Any] = {}
        """``for_tp``'s shardings, by ``tp``."""
        self._t_sizes: frozenset[tuple[int, int]] | None = None

    def _start_tensor(self) -> None:
        """Record the batch layouts and run the tensor pass for every ``tp``."""
        self._after_batch = (dict(self.layout), dict(self.partial), dict(self.forced))
        self._tensor_pass(None)

    # -- per-tp fallback ---------------------------------------------------------------------
    def for_tp(self, tp: int) -> Self:
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
        the ranks (``(H, 1)`` for an axis holding the batch and ``H`` heads), and of each
        weight sliced on use."""
        prog, lay = self.prog, self.layout
        for v in values:
            got = lay[v]
            a = t_axis(got)
            if a is not None:
                m = got.marks[a]
                yield (prog.shape(v)[a], got.groups) if m == T else (bt_heads(str(m)), 1)
        for (op, k), s in sliced.items():
            a = s.axis(T)
            x = op.inputs[k]
            if a is not None and x is not None:
                yield prog.shape(x)[a], s.groups

    # -- candidates --------------------------------------------------------------------------
    def _accept_tensor(self, v: Value, layout: Layout, local: bool | None = False) -> bool:
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

    def _reshard(self, op: Op, k: int, v: Value, layout: Layout, undo: Undo) -> bool:
        return self._slicing and (self._gather_grad(op, undo)
                                  or self._slice_use(op, k, v, layout, undo))

    def _slice_use(self, op: Op, k: int, v: Value, layout: Layout,
                   undo: Undo) -> bool:
        """Let ``op`` take the whole weight ``v`` split as ``layout`` by slicing it locally,
        when ``v`` is shared with ops that take it whole (``sliced``), or is an
        ``Identity`` of such a weight. A trained weight is sliced only where it is shared by
        value (``_shared_by_value``); it stays whole: the part of its gradient that the
        sliced use gives is split too, and is gathered before it is summed with the others
        or applied (``_gather_grad``); else the candidate fails."""
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
        if src in self.trained and src is v and not self._shared_by_value(src):
            return False
        self.sliced[(op, k)] = layout
        undo.append(((op, k), None, None))
        return True

    def _shared_by_value(self, w: Value) -> bool:
        """Whether the trained weight ``w`` is one value that the exporter made of equal
        initializers: read through ``Identity`` copies (TorchScript), or by ops of two
        kinds other than its optimizer and gradient ops (dynamo: a ``LayerNormalization``
        and the ``Add`` of a projection's bias). Its gradient ops read it too, so that a
        weight has several users does not tell."""
        prog = self.prog
        kinds = {prog.ops[u].op_type for u in prog.users.get(w, ())}
        return "Identity" in kinds or len({k for k in kinds if k not in OPTIMIZERS
                                            and not k.endswith("Grad")}) > 1

    def _gather_grad(self, op: Op, undo: Undo) -> bool:
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
                undo: Undo = [(w, self.layout[w], None)]
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

    def _divides(self, undo: Undo, tp: int | None) -> bool:
        """Whether ``tp`` divides every axis the candidate of ``undo`` splits (always, with
        no ``tp``: the analysis for every degree)."""
        if tp is None:
            return True
        sliced = {k: self.sliced[k] for k, _, _ in undo
                  if isinstance(k, tuple) and isinstance(k[0], Op) and k in self.sliced}
        vals = (v for v, _, _ in undo if isinstance(v, Value))
        return all(n % (tp * g) == 0 for n, g in self._split_sizes(vals, sliced))

    def _closed(self, undo: Undo) -> bool:
        """Whether no activation split over ``tp`` reaches the function's results."""
        prog = self.prog
        for v, _, _ in undo:
            if v in prog.returned and T in self.layout[v].marks:
                op = prog.producer_op(v)
                if op is None or op.op_type not in OPTIMIZERS:
                    return False
        return True
