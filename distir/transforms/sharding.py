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
2. **Tensor (Megatron)**, by pattern: see ``tensor_pass`` (candidates, pulled splits,
   weights sliced on use, the per-``tp`` fallback ``for_tp``).

Both passes use one worklist loop (``propagation.Propagation._propagate``) over op indices
in program order; the cost is proportional to the ops each split reaches, not to the
function size per candidate.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from distir.errors import TransformError
from distir.ir.core import Op, Value
from distir.transforms.batch_inputs import find_batch_inputs
from distir.transforms.layout import B, Layout, Reject, T, replicated
from distir.transforms.layout_rules import BROADCAST, UNARY
from distir.transforms.layout_shape_rules import reshape_layout
from distir.transforms.program import Program, in_own_blocks
from distir.transforms.propagation import OPTIMIZERS
from distir.transforms.tensor_pass import TensorPass

__all__ = ["Sharding", "OPTIMIZERS"]

_ELEMENTWISE = frozenset(UNARY) | frozenset(BROADCAST)
_RESHAPES = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze"})


class Sharding(TensorPass):
    """Layouts (``layout``) and partial-sum marks (``partial``) of the live values of a
    ``Program`` under D and T; ``batch_size`` is the size of the split batch axis
    (``None`` if none). ``for_tp(tp)`` gives the layouts for ``tp`` ranks."""

    def __init__(self, prog: Program, batch_inputs: Sequence[str] | None = None,
                 weights: Sequence[str] = ()) -> None:
        super().__init__(prog)
        self.batch_size: int | None = None
        self.batch_error: str | None = None
        """Why the batch cannot be split, if it cannot."""
        self._ranges: dict[Value, int] = {}
        """Values split by ``_pull_batch``: the ``Range`` sources over the local batch each is
        made from (so that a value reached twice counts them again)."""
        self._find_roles(batch_inputs, weights)
        self._batch_pass()
        self._start_tensor()

    # -- roles -----------------------------------------------------------------------------
    def _find_roles(self, batch_inputs: Sequence[str] | None, weights: Sequence[str]) -> None:
        prog = self.prog
        params = prog.fn.params
        for i in prog.live_ops:
            op = prog.ops[i]
            for k in OPTIMIZERS.get(op.op_type, ()):
                v = op.inputs[k]
                if v in prog.param_set:
                    self.trained.add(v)
        names = {p.name for p in params}
        unknown = [w for w in weights if w not in names]
        if unknown:
            raise TransformError(f"weight %{unknown[0]} is not a parameter of "
                                 f"@{prog.fn.name}")
        bound = set(prog.fn.initializers).union(weights)
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

    # -- pass 1: batch ---------------------------------------------------------------------
    def _accept_batch(self, v: Value, layout: Layout, local: bool | None = False) -> bool:
        """Whether ``v`` may take the batch split ``layout`` that an op demands: a parameter
        that is data (not a weight, of the batch size along the split axis), or a
        batch-free value whose shards each device can make itself (``_pull_batch``).
        ``local``: ``v`` indexes a batch-split tensor, so its shards must be made from
        local shapes (at least one ``Range`` over the local batch); ``None``: whichever
        ``v`` is made for (``_from_batch_range``: a value split as data refuses a ``Range``
        over the batch, local indices need one), tried once."""
        if local is None:  # one attempt: a failed one may leave values split
            return self._accept_batch(v, layout, self._from_batch_range(v))
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

    def _from_batch_range(self, v: Value) -> bool:
        """Whether ``v`` is computed from a ``Range`` over the batch size (then it can only
        be split as local indices; else only as data)."""
        return self.prog.derived_from(v, lambda _, op: op is not None and op.op_type == "Range"
                                      and self._is_batch_size(op.inputs[1], 0))

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
            return self._ranges.get(v, 0)
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
        elif t == "Transpose":  # (DeBERTa's relative-position keys, tiled, then transposed)
            x = op.inputs[0]
            perm = prog.attrs(op).get("perm") or tuple(range(len(so) - 1, -1, -1))
            moved: list[str | None] = [None] * len(so)
            for j, a in enumerate(perm):
                moved[a] = want.marks[j]
            pulls.append((x, Layout(tuple(moved))))  # type: ignore[arg-type]
        elif t == "Tile":
            # a batch-free value tiled by the batch size (ALiBi's biases, once per sample, in
            # an axis merging batch and heads): each shard tiles it by its own samples
            # (every other repeat count a constant: one read from a shape would be the
            # shard's too, and shorten an axis that stays whole)
            if op.inputs[0] is None or local or B not in want.marks or \
                    any(m not in (None, B) for m in want.marks):
                return None
            for a, m in enumerate(want.marks):
                if not (self._tiles_batch(op, a) if m == B else self._repeat_is_fixed(op, a)):
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
            lay = Layout(want.marks[axis:axis + ri])
            if not local and lay.marks[:1] == (B,) and self._from_batch_range(idx):
                # A gather from a batch-sized tensor flattened along ``axis`` at indices made
                # from the batch size (TorchScript's advanced indexing of ConvBERT's mask, an
                # exported ``as_strided``): the data split along ``axis`` with each shard's
                # own rows, the indices made from the local batch size; only where each
                # sample's indices, known before running, address its own block of rows.
                rows = prog.shape(data)[axis]
                known = prog.known(idx)
                if known is None or not in_own_blocks(np.where(known < 0, known + rows, known),
                                                      rows, prog.shape(idx)[0]):
                    return None
                n = self._pull_batch(idx, lay, depth + 1, True)
                if not n:
                    return None
                self.local_index.add(idx)
                found += n
                pulls.append((data, Layout(tuple(B if a == axis else None
                                                 for a in range(rd)))))
            else:
                pulls.append((idx, lay))
        elif t == "CumSum":
            c = prog.const(op.inputs[1])
            if c is None:
                return None
            axis = int(np.asarray(c).reshape(-1)[0])
            if want.marks[axis + len(so) if axis < 0 else axis] is not None:
                return None  # a scan along the split axis needs the earlier shards' sums
            pulls.append((op.inputs[0], want))  # type: ignore[arg-type]
        elif t == "Slice":
            x = op.inputs[0]
            sx = prog.shape(x)  # type: ignore[arg-type]
            if len(sx) != len(so) or any(m is not None and sx[a] != so[a]
                                         for a, m in enumerate(want.marks)):
                return None  # (a split axis sliced)
            pulls.append((x, want))  # type: ignore[arg-type]
        elif t == "GatherND":
            # Rows of a batch-indexed gather (a mask read at positions, per sample): the data
            # split by its batch axis and the index tuples made from the local batch size,
            # so that each shard gathers its own rows.
            data, idx = op.inputs[0], op.inputs[1]
            if data is None or idx is None or int(prog.attrs(op).get("batch_dims", 0)) or \
                    want.marks[0] != B or any(want.marks[1:]):
                return None
            sd, si = prog.shape(data), prog.shape(idx)
            if len(si) < 2 or si[-1] < 1 or sd[0] != so[0]:
                return None
            n = self._pull_batch(idx, Layout((B,) + (None,) * (len(si) - 1)), depth + 1, True)
            if not n:
                return None
            self.local_index.add(idx)
            found += n
            pulls.append((data, Layout((B,) + (None,) * (len(sd) - 1))))
        else:
            return None
        for x, lay in pulls:
            n = self._pull_batch(x, lay, depth + 1, local)
            if n is None:
                return None
            found += n
        self.forced[v] = want
        self.layout[v] = want
        self._ranges[v] = found
        self._pulled.append(v)
        return found

    def _repeats_piece(self, op: Op, axis: int) -> Value | None:
        """The one-element input of the ``Concat`` making the ``Tile`` ``op``'s repeats
        that holds the repeat count of ``axis``, or ``None``."""
        prog = self.prog
        reps = prog.producer_op(op.inputs[1]) if op.inputs[1] is not None else None
        if reps is None or reps.op_type != "Concat":
            return None
        at = 0
        for x in reps.inputs:
            n = int(np.prod(prog.shape(x))) if x is not None else 0
            if at <= axis < at + n:
                return x if n == 1 else None
            at += n
        return None

    def _tiles_batch(self, op: Op, axis: int) -> bool:
        """Whether the ``Tile`` ``op`` repeats its input along ``axis`` once per sample: its
        repeats are a ``Concat`` whose element ``axis`` holds the batch size."""
        x = self._repeats_piece(op, axis)
        return x is not None and self._is_batch_size(x, 0)

    def _repeat_is_fixed(self, op: Op, axis: int) -> bool:
        """Whether the ``Tile`` ``op``'s repeat count of ``axis`` is a ``Constant`` of the
        program (not a size read from a shape, which a shard would read locally)."""
        x = self._repeats_piece(op, axis)
        src = self.prog.producer_op(x) if x is not None else None
        return src is not None and src.op_type == "Constant"

    def _is_batch_size(self, v: Value | None, depth: int) -> bool:
        """Whether ``v`` holds the batch size, read from the shape of a batch-split value
        (``Gather(Shape(x), a)`` with axis ``a`` of ``x`` split): its local value is the
        shard's batch. A split axis that merges the batch with another (batch x heads)
        read and divided by a constant (``size(0) // heads``, as DeBERTa's attention
        tiles its relative-position keys) holds the shard's samples too."""
        prog = self.prog
        op = prog.producer_op(v) if v is not None else None
        if op is None or depth > 16:
            return False
        t = op.op_type
        if t in ("Squeeze", "Unsqueeze", "Cast", "Reshape", "Identity"):
            return self._is_batch_size(op.inputs[0], depth + 1)
        if t == "Div":
            # The shard's value is its own samples only where the divisor is a whole number
            # that divides each sample's extent along the axis read (heads of batch x heads):
            # then every shard of whole samples divides exactly, as the whole axis does.
            c, whole = prog.const(op.inputs[1]), prog.const(op.inputs[0])
            if c is None or whole is None or np.asarray(c).size != 1 or \
                    np.asarray(whole).size != 1 or not self.batch_size:
                return False
            div, size = float(np.asarray(c).reshape(-1)[0]), int(np.asarray(whole).reshape(-1)[0])
            per_sample, rest = divmod(size, self.batch_size)
            return div >= 1 and div == int(div) and not rest and \
                per_sample % int(div) == 0 and self._is_batch_size(op.inputs[0], depth + 1)
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
