"""The structure a pipeline needs: what runs per microbatch, what runs once, and which
layer each op belongs to.

Every live op of the sequential function falls in one class:

- ``HOIST``: independent of the batch (constants, shape arithmetic, the position ids and
  causal mask, weight-only ops such as a tied LM head's ``Transpose``). Computed once per
  device that needs it, before the microbatches; ``Shape`` of an activation is the constant
  local shape.
- ``MB``: depends on the batch; runs once per microbatch, in the forward (``F``) or the
  backward (``B``) phase. The backward starts at a loss gradient (``MSELossGrad``,
  ``SoftmaxCrossEntropyLossGrad``) and contains everything that depends on it.
- ``POST``: consumes batch-reduced values (gradients summed over microbatches and
  replicas): optimizer updates. Runs once, after the microbatches.

**Layers** are found without looking at names: the forward ops that read a weight (a
parameter that is not a batch input, or a value computed from weights only) form a
sequence, each element the op type with the types of the forward ops that follow it up to
the next weight op: ``Gather Add (LN MatMul Add[attention] MatMul Add[residual] LN MatMul
Add[Gelu] MatMul Add[residual])×n LN MatMul`` for GPT-2, ``(MatMul[Relu])×L`` for an MLP.
Its longest periodic run with a matrix product in the period gives the layers, extended by
whole blocks next to it whose op types match (an MLP's last layer, which has no activation
after it); the phase is the one whose block boundary has the fewest live forward
activations (the residual stream alone, for GPT-2). Ops before the run belong to no layer
(anchor 0), ops after it neither (anchor ``L + 1``).

Each op gets a *position* (``pos``): the weight ops are positions ``1 .. n`` in program
order, 0 is before the first. A forward op takes the largest position of its inputs (and
its own); a backward op that of the forward values and weights it reads (of a weight read
at several positions, the use it belongs to: ``_use_of``), so an op's backward runs where
its forward ran. Its *anchor* is its position's layer: 0 before the first layer, ``r + 1``
in layer ``r``, ``L + 1`` after the last (layer functions group ops by anchor).
``partition.StagePartition`` cuts the positions into pipeline stages.
"""

from __future__ import annotations

import numpy as np

from distir.errors import TransformError
from distir.ir.core import Value
from distir.transforms.layout import Layout, is_batch
from distir.transforms.program import SHAPE_OPS, Program
from distir.transforms.sharding import Sharding

__all__ = ["Structure", "HOIST", "MB", "POST", "LOSS_GRADS"]

HOIST, MB, POST = 0, 1, 2
LOSS_GRADS = frozenset({"MSELossGrad", "SoftmaxCrossEntropyLossGrad"})
_HEAVY = frozenset({"MatMul", "Gemm", "Conv", "MatMulGrad", "GemmGrad", "Einsum"})


class Structure:
    """Classes, phases and anchors of the live ops of ``prog``."""

    def __init__(self, prog: Program, sh: Sharding) -> None:
        self.prog = prog
        self.sh = sh
        self.kind: dict[int, int] = {}
        self.backward: set[int] = set()
        self.anchor: dict[int, int] = {}
        self.reduced: set[Value] = set()
        """MB results that are partial over the batch: summed after the microbatches."""
        self.pos: dict[int, int] = {}
        """Each op's position: like its anchor, counted in weight ops rather than layers."""
        self.param_pos: dict[Value, set[int]] = {}
        self.upward_pos: list[tuple[int, int, int]] = []
        """Backward values flowing to a later position: ``(from pos, to pos, op)``."""
        self._classify()
        self._find_layers()
        self._anchor_ops()

    def _classify(self) -> None:
        prog, sh = self.prog, self.sh
        vk: dict[Value, str] = {p: ("m" if p in sh.data and _batched(sh.layout[p]) else "h")
                                for p in prog.fn.params}
        bwd: set[Value] = set()
        for i in prog.live_ops:
            op = prog.ops[i]
            if op.op_type in SHAPE_OPS:
                self.kind[i] = HOIST
                for v in op.outputs:
                    vk[v] = "h"
                continue
            ks = {vk.get(v, "h") for v in op.inputs if v is not None}
            if "m" in ks:
                if "p" in ks or "o" in ks:
                    raise TransformError(f"`{prog.op_text(op)}` mixes a per-microbatch value "
                                         "with a value summed over the batch: not supported")
                self.kind[i] = MB
                if op.op_type in LOSS_GRADS or any(v in bwd for v in op.inputs):
                    self.backward.add(i)
                    bwd.update(op.outputs)
                for v in op.outputs:
                    if "b" in sh.partial.get(v, ""):
                        vk[v] = "p"
                        self.reduced.add(v)
                    elif _batched(sh.layout[v]) or v not in prog.live_values:
                        vk[v] = "m"
                    else:
                        raise TransformError(f"the result %{v.name} of `{prog.op_text(op)}` "
                                             "does not keep the batch axis: not supported")
            elif "p" in ks or "o" in ks:
                self.kind[i] = POST
                for v in op.outputs:
                    vk[v] = "o"
            else:
                self.kind[i] = HOIST
                for v in op.outputs:
                    vk[v] = "h"
        self.value_kind = vk
        self.bwd_values = bwd

    def _weightish(self) -> set[Value]:
        """Weights, and values computed from weights and constants only."""
        prog = self.prog
        w = {p for p in prog.fn.params if self.value_kind[p] == "h"}
        for i in prog.live_ops:
            if self.kind[i] == HOIST and prog.ops[i].op_type not in SHAPE_OPS and any(
                    v in w for v in prog.ops[i].inputs if v is not None):
                w.update(prog.ops[i].outputs)
        return w

    def _find_layers(self) -> None:
        prog = self.prog
        wish = self._weightish()
        seq: list[int] = []
        context: list[list[str]] = []  # op types of the forward ops after each weight op
        for i in prog.live_ops:
            if self.kind[i] != MB or i in self.backward:
                continue
            op = prog.ops[i]
            if any(v in wish for v in op.inputs if v is not None):
                seq.append(i)
                context.append([])
            elif context:
                context[-1].append(op.op_type)
        sig = [(prog.ops[i].op_type, tuple(c)) for i, c in zip(seq, context, strict=True)]
        start, period, reps, extent = _periodic_run(sig)
        if reps < 2:  # e.g. two layers, the last without an activation: op types alone
            start, period, reps, extent = _periodic_run([(t, ()) for t, _ in sig])
        if reps >= 2:
            start = self._best_phase(seq, start, period, extent - reps * period)
            # A whole block next to the run whose op types match (only what follows its
            # ops differs: the last layer of an MLP has no activation) is a layer too.
            types = [t for t, _ in sig]
            block = types[start:start + period]
            while start >= period and types[start - period:start] == block:
                start -= period
                reps += 1
            while types[start + reps * period:start + (reps + 1) * period] == block:
                reps += 1
        else:
            start, period, reps = 0, len(seq), 1 if seq else 0
        self.num_layers = reps
        self.seq_anchor: dict[int, int] = {}
        self.seq_pos: dict[int, int] = {}
        self.unit_layer: list[int] = [0]
        """The layer anchor of each position (``pos``): 0, then that of each weight op."""
        for pos, i in enumerate(seq):
            if pos < start:
                a = 0
            elif pos < start + reps * period:
                a = (pos - start) // period + 1
            else:
                a = reps + 1
            self.seq_anchor[i] = a
            self.seq_pos[i] = pos + 1
            self.unit_layer.append(a)
        self.layer_ops = (start, period, [prog.ops[i] for i in seq])

    def _best_phase(self, seq: list[int], run: int, period: int, slack: int) -> int:
        """The start, among the shifts of the periodic run, whose second block boundary
        has the fewest forward activations live across it."""
        prog = self.prog
        n = len(prog.ops)
        diff = np.zeros(n + 2, dtype=np.int64)
        for i in prog.live_ops:
            if self.kind[i] != MB or i in self.backward:
                continue
            for v in prog.ops[i].outputs:
                last = max((u for u in prog.users.get(v, ()) if u not in self.backward),
                           default=None)
                if last is not None:
                    diff[i + 1] += 1
                    diff[last + 1] -= 1
        live = np.cumsum(diff)
        best, best_cost = run, None
        for s0 in range(run, run + slack + 1):
            if s0 + period >= len(seq):
                break
            cost = int(live[seq[s0 + period]])
            if best_cost is None or cost < best_cost:
                best, best_cost = s0, cost
        return best

    def _anchor_ops(self) -> None:
        prog, sh = self.prog, self.sh
        anchor, pos = self.anchor, self.pos
        wpos = self.param_pos
        for i, a in self.seq_pos.items():
            for v in prog.ops[i].inputs:
                if v is not None and v in prog.param_set and v not in sh.data:
                    wpos.setdefault(v, set()).add(a)
        layer = self.unit_layer
        prod = prog.producer
        for i in prog.live_ops:
            k = self.kind[i]
            if k == HOIST:
                continue
            op = prog.ops[i]
            if k == MB and i not in self.backward:
                p = self.seq_pos.get(i, 0)
                for v in op.inputs:
                    j = prod.get(v) if v is not None else None
                    if j is not None and j in pos:
                        p = max(p, pos[j])
            else:
                fw: list[int] = []
                bw: list[int] = []
                ws: list[set[int]] = []
                for v in op.inputs:
                    if v is None:
                        continue
                    if v in wpos and v not in sh.data:
                        ws.append(wpos[v])
                    j = prod.get(v)
                    if j is not None and j in pos:
                        (bw if (v in self.bwd_values or self.kind[j] == POST) else
                         fw).append(pos[j])
                fw.extend(_use_of(w, max(fw) if fw else None, min(bw) if bw else None)
                          for w in ws)
                p = max(fw) if fw else (min(bw) if bw else 0)
                if k == MB:
                    for v in op.inputs:
                        j = prod.get(v) if v is not None else None
                        if j is not None and v in self.bwd_values and pos[j] < p:
                            self.upward_pos.append((pos[j], p, i))
            pos[i] = p
            anchor[i] = layer[p]


def _periodic_run(sig: list[tuple[str, tuple[str, ...]]]) -> tuple[int, int, int, int]:
    """``(start, period, repetitions, extent)`` of the periodic run of ``sig`` that covers
    the most elements (ties: the shortest period), whose period contains a matrix product;
    ``extent`` counts the elements of the run including a partial last period. Fewer than 2
    repetitions means none was found."""
    n = len(sig)
    if n < 2:
        return 0, n, 1 if n else 0, n
    ids: dict[tuple, int] = {}
    arr = np.array([ids.setdefault(s, len(ids)) for s in sig], dtype=np.int64)
    heavy = np.array([s[0] in _HEAVY for s in sig], dtype=bool)
    best = (0, n, 1, n)
    best_cov = 0
    for p in range(1, n // 2 + 1):
        eq = np.concatenate(([False], arr[:-p] == arr[p:], [False])).astype(np.int8)
        d = np.diff(eq)
        starts = np.flatnonzero(d == 1)
        ends = np.flatnonzero(d == -1)
        for s, e in zip(starts, ends, strict=True):
            r = int(e - s)
            reps = (r + p) // p
            if reps < 2 or reps * p <= best_cov:
                continue
            if not heavy[s:s + p].any():
                continue
            best, best_cov = (int(s), p, reps, r + p), reps * p
    return best


def _use_of(ps: set[int], fw: int | None, bw: int | None) -> int:
    """The position of the use of a weight read at positions ``ps`` that a backward op
    belongs to: the only one; else the first at or after the op's other forward inputs
    (``fw``); else the last at or before its backward inputs (``bw``); else the last."""
    if len(ps) == 1:
        return next(iter(ps))
    if fw is not None:
        return min((p for p in ps if p >= fw), default=max(ps))
    if bw is not None:
        return max((p for p in ps if p <= bw), default=min(ps))
    return max(ps)


def _batched(lay: Layout) -> bool:
    return any(is_batch(m) for m in lay.marks)

