"""Stage partitioning: which pipeline stage each op of a sequential step runs in.

The forward ops of a program form a sequence of *positions* (``Structure.pos``): position
``u >= 1`` is the ``u``-th op that reads a weight together with the forward ops after it
that depend on it, position 0 what comes before the first; a backward op takes the
position of the forward values and weights it reads, so the backward of stage ``s`` runs
on the devices of its forward. Stages are contiguous ranges of positions, separated by
*cuts*; a cut before position ``u`` is *valid* unless a backward value flows from a
position before it to one after it (the pipeline sends gradients only towards earlier
stages). A weight read on both sides of a cut is placed on both stages; when it is
trained, each stage's part of its gradient goes to the update's stage (the last that reads
the weight), where they are summed.

``stage_map(pp)`` picks the cuts:

1. When the program has repeated layers (``num_layers >= 2``), ``pp`` divides their number,
   the cuts between equal numbers of layers are valid and their slowest stage is within
   ``UNIFORM_SLACK`` (10%) of the balanced one of step 2, the stages get equal numbers of
   layers (the pre-layer ops with the first, the rest with the last), as before cost-based
   partitioning existed: the MLP and GPT-2 builders' programs are unchanged.
2. Otherwise the cuts minimise the slowest stage: ``max`` over stages of the simulated time
   of its ops (forward, backward and update, the cost rules ``COST_RULES`` on the
   ``h100-sxm`` profile, full batch) plus the time to send the activations crossing each
   of its cuts, by a dynamic program over the prefix sums of the positions' costs. With
   repeated layers that hold at least ``LAYER_SHARE`` (half) of the cost, cuts fall only
   between layers (layers stay whole) when enough of those are valid and their slowest
   stage is within ``LAYER_SLACK`` (25%) of the best cut anywhere; else anywhere valid.
   Whole layers are worth some imbalance (equal stages repeat one function, and a layer's
   activations are not cut), not any: ResNet-50's "layers" are two long repeated runs,
   and 4 stages of whole ones had their slowest at 24.7 ms (simulated, h200-sxm) against
   15.4 ms cut anywhere. The GPT-2 builder's programs up to 4 stages are within 16% and
   keep whole layers. Every stage gets at least one forward op.

No valid choice raises a ``TransformError`` naming the constraint. Costs are computed once
per ``Structure`` and only when step 2 is reached; maps are memoized per ``pp``.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from distir.errors import TransformError
from distir.transforms.structure import HOIST, MB, Structure

__all__ = ["StagePartition", "PROFILE", "UNIFORM_SLACK", "LAYER_SLACK", "LAYER_SHARE"]

PROFILE = "h100-sxm"
"""The hardware profile whose cost rules weigh the ops when balancing stages (only the
ratios matter)."""

LAYER_SHARE = 0.5
"""Layers are kept whole only when they hold at least this fraction of the cost (a short
periodic run among the embeddings is no stack of layers)."""
UNIFORM_SLACK = 1.1
"""Equal numbers of layers per stage are kept while their slowest stage is within this
factor of the cost-balanced one's."""
LAYER_SLACK = 1.25
"""Cuts are kept between layers while their slowest stage is within this factor of the
best cut anywhere's."""


@functools.cache
def _hardware() -> Any:
    from distir.analysis.hardware import load_hardware

    try:
        return load_hardware(PROFILE)
    except Exception:  # pragma: no cover - the profile ships with the package
        return None


class StagePartition:
    """The valid cuts and costs of a ``Structure``'s positions, and its stage maps."""

    def __init__(self, st: Structure, hardware: Any = None) -> None:
        self.st = st
        self.hardware = hardware
        """A ``Hardware`` profile weighing the ops (default: ``PROFILE``)."""
        n = len(st.unit_layer)  # positions 0 .. n-1; a cut ``u`` lies before position u
        self.n = n
        fwd = np.zeros(n, dtype=np.int64)
        for i, p in st.pos.items():
            if st.kind[i] == MB and i not in st.backward:
                fwd[p] += 1
        self.fwd_prefix = np.concatenate(([0], np.cumsum(fwd)))
        bad = np.zeros(n + 1, dtype=np.int64)
        self.blocks: list[tuple[int, int, str]] = []
        """``(first, last, why)``: the cuts ``first .. last`` are invalid because of ``why``."""
        prog = st.prog
        for a, b, i in st.upward_pos:
            bad[a + 1] += 1
            bad[b + 1] -= 1
            self.blocks.append((a + 1, b, f"the backward value read by "
                                f"`{prog.op_text(prog.ops[i])}` would flow to a later stage"))
        valid = np.cumsum(bad)[:n] == 0
        valid[0] = False
        self.valid = valid
        layer = np.array(st.unit_layer, dtype=np.int64)
        self.between_layers = np.zeros(n, dtype=bool)
        self.between_layers[1:] = layer[1:] != layer[:-1]
        self._maps: dict[int, np.ndarray] = {}
        self._costs: tuple[np.ndarray, np.ndarray] | None = None

    # -- stage maps ----------------------------------------------------------------------
    def stage_map(self, pp: int) -> np.ndarray:
        """The stage of each position for ``pp`` stages (see the module docstring)."""
        got = self._maps.get(pp)
        if got is None:
            got = self._maps[pp] = self._stage_map(pp)
        return got

    def _stage_map(self, pp: int) -> np.ndarray:
        st, n = self.st, self.n
        if pp == 1:
            return np.zeros(n, dtype=np.int64)
        nl = st.num_layers
        best = free = self._solve(pp, self.valid)
        if nl >= 2 and self._layer_share() >= LAYER_SHARE:
            # layers whole when enough cuts between them are valid and the slowest stage
            # stays within LAYER_SLACK of the best cut anywhere
            whole = self._solve(pp, self.valid & self.between_layers)
            if whole is not None and (free is None or self.slowest(whole) <= LAYER_SLACK
                                      * self.slowest(free)):
                best = whole
        if nl >= 2 and nl % pp == 0:
            layer = np.array(st.unit_layer, dtype=np.int64)
            stages = np.where(layer <= 0, 0, np.where(layer > nl, pp - 1,
                                                      (layer - 1) * pp // nl))
            cuts = [int(c) for c in np.flatnonzero(np.diff(stages)) + 1]
            if self.valid[cuts].all() and self._nonempty(stages, pp) and (
                    best is None or self.slowest(cuts) <= UNIFORM_SLACK * self.slowest(best)):
                return stages
        if best is None:
            raise TransformError(self._refusal(pp))
        chosen = best
        stages = np.zeros(n, dtype=np.int64)
        for c in chosen:
            stages[c:] += 1
        return stages

    def slowest(self, cuts: list[int]) -> float:
        """Seconds of the slowest stage between ``cuts``: its ops plus its sends."""
        cost, comm = self._cost_arrays()
        pre = np.concatenate(([0.0], np.cumsum(cost)))
        b = [0, *cuts, self.n]
        c = [0.0, *(float(comm[u]) for u in cuts), 0.0]
        return max(float(pre[b[k + 1]] - pre[b[k]]) + c[k] + c[k + 1]
                   for k in range(len(b) - 1))

    def _layer_share(self) -> float:
        """The fraction of the program's cost in its repeated layers."""
        cost, _ = self._cost_arrays()
        layer = np.array(self.st.unit_layer, dtype=np.int64)
        inside = (layer >= 1) & (layer <= self.st.num_layers)
        total = float(cost.sum())
        return float(cost[inside].sum()) / total if total > 0 else 1.0

    def _nonempty(self, stages: np.ndarray, pp: int) -> bool:
        f = np.diff(self.fwd_prefix)
        return all(f[stages == s].sum() > 0 for s in range(pp))

    def max_stages(self) -> int:
        """The most stages the valid cuts allow, each running a forward op (greedy: close
        a stage at the first valid cut after its first forward op)."""
        f = np.diff(self.fwd_prefix)
        count, open_fwd = 0, 0
        for u in range(self.n):
            if self.valid[u] and open_fwd:
                count, open_fwd = count + 1, 0
            open_fwd += int(f[u])
        return count + (open_fwd > 0)

    def _refusal(self, pp: int) -> str:
        name = self.st.prog.fn.name
        widest = max(self.blocks, key=lambda x: x[1] - x[0], default=None)
        reason = f"; elsewhere {widest[2]}" if widest is not None else ""
        return (f"pp={pp} is more pipeline stages than @{name} can be cut into "
                f"({self.max_stages()} at most{reason})")

    def _solve(self, pp: int, allowed: np.ndarray) -> list[int] | None:
        """The ``pp - 1`` cuts among ``allowed`` minimising the slowest stage, or ``None``
        when there are not enough cuts for stages that each run a forward op."""
        cand = np.flatnonzero(allowed)
        if len(cand) < pp - 1:
            return None
        cost, comm = self._cost_arrays()
        pre = np.concatenate(([0.0], np.cumsum(cost)))
        bounds = np.concatenate(([0], cand, [self.n]))  # stage boundaries
        m = len(bounds)
        fpre = self.fwd_prefix[bounds]
        cb = np.zeros(m)
        cb[1:-1] = comm[bounds[1:-1]]
        inf = np.inf
        best = np.full(m, inf)
        best[0] = 0.0
        back = np.zeros((pp, m), dtype=np.int64)
        for k in range(pp):
            nxt = np.full(m, inf)
            lo = 1 if k < pp - 1 else m - 1
            for j in range(lo, m if k < pp - 1 else m):
                if k < pp - 1 and j == m - 1:
                    continue
                prev = best[:j]
                stage = pre[bounds[j]] - pre[bounds[:j]] + cb[:j] + cb[j]
                t = np.maximum(prev, stage)
                t[fpre[j] - fpre[:j] <= 0] = inf
                i = int(np.argmin(t))
                nxt[j] = t[i]
                back[k, j] = i
            best = nxt
        if not np.isfinite(best[m - 1]):
            return None
        cuts: list[int] = []
        j = m - 1
        for k in range(pp - 1, 0, -1):
            j = int(back[k, j])
            cuts.append(int(bounds[j]))
        return sorted(cuts)

    # -- costs -----------------------------------------------------------------------------
    def _cost_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Seconds of each position's ops, and of the sends across each cut."""
        if self._costs is None:
            self._costs = _costs(self.st, self.n, self.hardware)
        return self._costs


def _costs(st: Structure, n: int, hardware: Any = None) -> tuple[np.ndarray, np.ndarray]:
    from distir.analysis.cost import COST_RULES, fallback_cost, load_cost_rules
    from distir.ir.types import TensorType

    load_cost_rules()
    hw = hardware if hardware is not None else _hardware()
    prog = st.prog
    cost = np.zeros(n)
    memo: dict[tuple, float] = {}
    crossing = np.zeros(n + 1)
    for i, p in st.pos.items():
        op = prog.ops[i]
        ins = tuple(None if v is None else prog.type(v) for v in op.inputs)
        outs = tuple(prog.type(v) for v in op.outputs)
        key = (op.op_type, ins, op.attrs_key, outs)
        c = memo.get(key)
        if c is None:
            c = memo[key] = _op_seconds(op.op_type, ins, outs, prog.attrs(op), hw,
                                        COST_RULES.get(op.op_type), fallback_cost)
        cost[p] += c
        if st.kind[i] != MB:
            continue
        for v in op.outputs:  # activations (and gradients) sent across cuts
            t = prog.type(v)
            if not isinstance(t, TensorType):
                continue
            far = [st.pos[u] for u in prog.users.get(v, ()) if u in st.pos
                   and st.kind[u] != HOIST]
            if not far:
                continue
            a, b = min(far + [p]), max(far + [p])
            if b > a:
                crossing[a + 1] += t.size_bytes
                crossing[b + 1] -= t.size_bytes
    nbytes = np.cumsum(crossing)[:n]
    if hw is None:
        comm = nbytes / 1e11
    else:
        comm = np.array([hw.comm_time("send", float(b), (0, 1)) if b else 0.0
                         for b in nbytes])
    return cost, comm


def _op_seconds(op_type: str, ins: tuple, outs: tuple, attrs: dict, hw: Any, rule: Any,
                fallback: Any) -> float:
    if hw is None:
        return float(sum(getattr(t, "size_bytes", 0) for t in (*ins, *outs) if t is not None))
    try:
        c = rule(op_type, ins, outs, attrs, hw) if rule is not None else fallback(
            op_type, ins, outs, attrs, hw)
    except Exception:  # a rule that cannot cost these types: weigh it by its bytes
        c = fallback(op_type, ins, outs, attrs, hw)
    return float(c.seconds)
