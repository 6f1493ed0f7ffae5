"""``search_small``: the best per-op placements of a small program on a mesh, by dynamic
programming over the program order. The seed of issue 19's search (no substitutions, no
memory limit, no series-parallel splitting: whole-program states, for programs of tens of
ops on meshes of a few devices).

A *plan* chooses, for every live op, the specs it reads (its outcome follows from the
rules); a parameter is placed as its first reader reads it, at no cost (it is loaded
placed). The search walks the ops in order keeping, per *state* (the spec of every value
still to be read), the cheapest plan reaching it; states are merged exactly, and only if
more than ``max_states`` remain after an op are the cheapest kept (``exact=False``).
A value may be read ``Replicate``, ``Partial``, ``Shard`` of any dimension, and in
interleaved groups (``Shard(d, groups=g)``) where ``grouped.py`` finds that the rules carry
them (attention split by heads); a value known before running only whole.

Costs are additive estimates: a read's redistribution costs its communicated elements
(``cost.py``'s convention) and ``Hardware.comm_time``; an op costs its local compute time
(the simulator's cost rules on local shapes). Two objectives:

- ``"elements"`` (default): fewest communicated elements, then least time, among plans
  that *divide the work*: every heavy op (at least ``heavy_fraction`` of the largest op's
  FLOPs) is split on every mesh axis: some read or result of it is not ``Replicate``.
  Without that constraint the answer is trivial: run everything replicated, send nothing.
- ``"time"``: least estimated time (compute + communication, no overlap), then fewest
  elements.

The ``top_k`` best final plans are lowered and re-ranked by (communicated elements of the
lowered program, simulated step time) or the reverse.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from distir.errors import ConfigError
from distir.ir.core import Function, Module, Op, Value
from distir.ir.types import TensorType
from distir.transforms.program import Program
from distir.transforms.spmd.assignment import LayoutAssignment, is_constant_op, is_shape_operand
from distir.transforms.spmd.grouped import grouped_shards
from distir.transforms.spmd.mesh import (
    Mesh,
    P,
    Partial,
    Placement,
    R,
    Shard,
    Spec,
    check_spec,
    local_shape,
    replicated,
)
from distir.transforms.spmd.propagate import program_of, resolve_seeds
from distir.transforms.spmd.redistribute import plan
from distir.transforms.spmd.rules import NotLocal, OpRules, Outcome

__all__ = ["search_small", "SearchResult"]

Cost = tuple[float, float]
Reads = tuple[Spec | None, ...]


@dataclass(frozen=True, eq=False)
class SearchResult:
    """The plan found: its ``assignment``, the lowered ``program`` (default variant), its
    ``elements`` (``communicated_elements``) and ``simulated_s`` (``distir.simulate``
    latency, seconds); ``estimate`` the search's own (elements, seconds); ``states`` the
    most states held after one op; ``exact`` whether no state was dropped."""

    assignment: LayoutAssignment
    program: Function
    elements: int
    simulated_s: float
    estimate: tuple[float, float]
    states: int
    exact: bool


class _Costs:
    def __init__(self, prog: Program, mesh: Mesh, hardware: Any) -> None:
        from distir.analysis.cost import COST_RULES, fallback_cost, load_cost_rules
        from distir.analysis.hardware import load_hardware

        load_cost_rules()
        self.rules_table = COST_RULES
        self.fallback = fallback_cost
        self.hw = load_hardware(hardware)
        self.prog = prog
        self.mesh = mesh
        self._read: dict[tuple, tuple[int, float]] = {}
        self._op: dict[tuple, float] = {}

    def _ltype(self, v: Value, spec: Spec | None) -> TensorType | None:
        t = self.prog.type(v)
        if not isinstance(t, TensorType):
            return None
        shp = t.shape if spec is None else local_shape(t.shape, spec, self.mesh)
        return TensorType(t.dtype, shp, 0)

    def read(self, v: Value, src: Spec, dst: Spec) -> tuple[int, float]:
        """(elements, seconds) of redistributing ``v`` from ``src`` to ``dst``."""
        if src == dst:
            return 0, 0.0
        t = self.prog.type(v)
        key = (t, src, dst)
        hit = self._read.get(key)
        if hit is None:
            mesh, hw = self.mesh, self.hw
            elems, secs = 0, 0.0
            for st in plan(src, dst):
                p = mesh.shape[st.axis]
                if st.kind == "split" or p == 1:
                    continue
                n = int(t.numel) // _prod(local_shape(t.shape, st.before, mesh), t.shape)
                groups = mesh.size // p
                if st.kind == "allreduce":
                    elems += 2 * (p - 1) * n * groups
                    nbytes = n * t.dtype.itemsize
                elif st.kind == "allgather":
                    elems += (p - 1) * n * p * groups
                    nbytes = n * p * t.dtype.itemsize
                else:
                    elems += (p - 1) * n * groups
                    nbytes = n * t.dtype.itemsize
                secs += hw.comm_time(st.kind, nbytes, mesh.devices[:p])
            hit = self._read[key] = (elems, secs)
        return hit

    def op(self, op: Op, reads: Reads, out: Outcome) -> float:
        key = (op, reads)
        hit = self._op.get(key)
        if hit is None:
            ins = tuple(None if v is None else self._ltype(v, s)
                        for v, s in zip(op.inputs, reads, strict=True))
            outs = tuple(self._ltype(o, s) for o, s in zip(op.outputs, out.outs, strict=True))
            rule = self.rules_table.get(op.op_type) or self.fallback
            hit = self._op[key] = rule(op.op_type, ins, outs,  # type: ignore[arg-type]
                                       self.prog.attrs(op), self.hw).seconds
        return hit

    def flops(self, op: Op) -> float:
        ins = tuple(None if v is None else self._ltype(v, None) for v in op.inputs)
        outs = tuple(self._ltype(o, None) for o in op.outputs)
        rule = self.rules_table.get(op.op_type) or self.fallback
        return float(rule(op.op_type, ins, outs,  # type: ignore[arg-type]
                          self.prog.attrs(op), self.hw).flops)


def _prod(local: tuple[int, ...], whole: tuple[int, ...]) -> int:
    r = 1
    for a, b in zip(local, whole, strict=True):
        r *= b // a
    return r


def _candidates(shape: tuple[int, ...], mesh: Mesh,
                grouped: frozenset[tuple[int, int]] = frozenset()) -> list[Spec]:
    """Every spec a value of ``shape`` may be read as: per mesh axis ``Replicate``,
    ``Partial``, ``Shard`` of each dimension, and the interleaved ``grouped`` shards
    ``(dimension, groups)`` that ``grouped_shards`` found for it."""
    per_axis: list[Placement] = [R, P, *(Shard(d) for d in range(len(shape))),
                                 *(Shard(d, g) for d, g in sorted(grouped))]
    return [s for s in itertools.product(per_axis, repeat=mesh.ndim)
            if check_spec(shape, s, mesh) is None]


def _strategies(rules: OpRules, op: Op, cands: dict[Value, list[Spec]]) -> list[
        tuple[Reads, Outcome]]:
    """Every choice of reads of ``op`` that the rules accept, with its outcome."""
    opts: list[list[Spec | None]] = []
    for k, v in enumerate(op.inputs):
        opts.append([None] if v is None or is_shape_operand(op, k) else list(cands[v]))
    out = []
    for reads in itertools.product(*opts):
        try:
            out.append((reads, rules.apply(op, reads)))
        except NotLocal:
            continue
    return out


STATE_UPDATES: dict[str, tuple[tuple[int, int], ...]] = {
    "SGDOptimizer": ((0, 0),), "AdamOptimizer": ((0, 0), (1, 2), (2, 3)),
}
"""``op -> ((result, input), ...)``: results that are the next step's value of an input (a
weight, an optimizer moment). A plan must read that input as it is placed and leave the
result placed alike, so that the next step starts where this one did: a plan may not
"save" an all-gather by returning weights split that it was given whole."""


def _divides(reads: Reads, out: Outcome, mesh: Mesh) -> bool:
    """Whether every mesh axis (of more than one device) splits this op's work."""
    specs = [s for s in reads if s is not None] + list(out.outs)
    return all(mesh.shape[a] == 1 or any(s[a] != R for s in specs) for a in range(mesh.ndim))


def search_small(fn: Function | Module | Program, mesh: Mesh, *,
                 objective: str = "elements", hardware: Any = "h100-sxm",
                 fixed: dict[Value | str, Spec | Placement] | None = None,
                 heavy_fraction: float = 0.01,
                 max_states: int = 50_000, top_k: int = 4) -> SearchResult:
    """The best per-op placement plan of ``fn`` on ``mesh`` (see the module docstring).
    ``fixed`` pins parameters' placements (``{"x": (Shard(0),)}``: the batch arrives
    split); others are free."""
    if objective not in ("elements", "time"):
        raise ConfigError(f"objective must be 'elements' or 'time', got {objective!r}")
    prog = program_of(fn)
    rules = OpRules(prog, mesh)
    grouped = grouped_shards(prog, rules)
    costs = _Costs(prog, mesh, hardware)
    pins = resolve_seeds(prog, mesh, fixed or {})
    ops = [i for i in prog.live_ops if not is_constant_op(prog, prog.ops[i])]
    last: dict[Value, int] = {}
    for i in ops:
        for k, v in enumerate(prog.ops[i].inputs):
            if v is not None and not is_shape_operand(prog.ops[i], k):
                last[v] = i
    vid = {v: n for n, v in enumerate(prog.env)}
    cands: dict[Value, list[Spec]] = {}
    for v in last:
        shp = prog.shape(v)
        # a value known before running (a ReduceSum's axes) is read whole: split, the
        # lowering would hand each device a part of the axes list
        cands[v] = [replicated(mesh)] if prog.const(v) is not None else \
            _candidates(shp, mesh, grouped.get(v, frozenset()))
    max_flops = max((costs.flops(prog.ops[i]) for i in ops), default=0.0)
    rep = replicated(mesh)
    # a state: ((value id, (spec or None = not placed yet, specs made)), ...) sorted by id;
    # values of constant ops are not in it (Replicate)
    start = tuple(sorted((vid[p], (pins[p], frozenset({pins[p]})) if p in pins else
                          (None, frozenset())) for p in prog.fn.params if p in last))
    states: dict[tuple, tuple[Cost, Any]] = {start: ((0.0, 0.0), None)}
    by_id = {n: v for v, n in vid.items()}
    peak, exact = 1, True
    whole = (rep, frozenset({rep}))
    for i in ops:
        op = prog.ops[i]
        heavy = objective == "elements" and max_flops > 0 and \
            costs.flops(op) >= heavy_fraction * max_flops
        strat = [(r, o) for r, o in _strategies(rules, op, cands)
                 if not heavy or _divides(r, o, mesh)]
        if not strat:
            raise ConfigError(f"`{prog.op_text(op)}`: no placement of its inputs divides its "
                              "work on this mesh; search with objective='time'")
        dead = {vid[v] for v in op.inputs if v is not None and last.get(v) == i}
        held = {vid[x] for x in (op.inputs[j] for _, j in STATE_UPDATES.get(op.op_type, ())
                                 if j < len(op.inputs)) if x is not None}
        nxt: dict[tuple, tuple[Cost, Any]] = {}
        for key, (cost, back) in states.items():
            have = dict(key)
            for reads, out in strat:
                el, secs = 0.0, costs.op(op, reads, out)
                upd: dict[int, tuple[Spec | None, frozenset[Spec]]] = {}
                ok = True
                for v, s in zip(op.inputs, reads, strict=True):
                    if s is None or v is None:
                        continue
                    n = vid[v]
                    src, made = upd.get(n) or have.get(n) or whole
                    if src is None:  # a parameter not placed yet: placed as read
                        if any(isinstance(p, Partial) for p in s):
                            ok = False
                            break
                        upd[n] = (s, frozenset({s}))
                        continue
                    if any(isinstance(b, Partial) and not isinstance(a, Partial)
                           for a, b in zip(src, s, strict=True)) or (n in held and src != s):
                        ok = False
                        break
                    if s in made:  # made for an earlier reader: the lowering reuses it
                        continue
                    e, t = costs.read(v, src, s)
                    el += e
                    secs += t
                    upd[n] = (src, made | {st.after for st in plan(src, s)})
                if not ok:
                    continue
                new = {**have, **upd}
                for n in dead:
                    new.pop(n, None)
                for o, s in zip(op.outputs, out.outs, strict=True):
                    if o in last:
                        new[vid[o]] = (s, frozenset({s}))
                nk = tuple(sorted(new.items(), key=lambda x: x[0]))  # type: ignore[arg-type]
                c = (cost[0] + el, cost[1] + secs) if objective == "elements" else \
                    (cost[0] + secs, cost[1] + el)
                old = nxt.get(nk)
                if old is None or c < old[0]:
                    nxt[nk] = (c, (i, reads, back))
        if len(nxt) > max_states:
            exact = False
            nxt = dict(sorted(nxt.items(), key=lambda kv: kv[1][0])[:max_states])
        states = nxt
        peak = max(peak, len(states))
    finals = sorted(states.values(), key=lambda cv: cv[0])[:max(top_k, 1)]
    best: tuple[Any, ...] | None = None
    for cost, back in finals:
        a = _assignment(prog, mesh, rules, back, pins, by_id)
        from distir.analysis.simulator import simulate
        from distir.transforms.spmd.cost import communicated_elements
        from distir.transforms.spmd.lower import lower

        prog_fn = lower(a)
        el = communicated_elements(prog_fn)
        sim = simulate(prog_fn, costs.hw).latency_s
        est = (cost[0], cost[1]) if objective == "elements" else (cost[1], cost[0])
        rank = (el, sim) if objective == "elements" else (sim, el)
        if best is None or rank < best[0]:
            best = (rank, a, prog_fn, el, sim, est)
    assert best is not None
    _, a, prog_fn, el, sim, est = best
    return SearchResult(a, prog_fn, el, sim, est, peak, exact)


def _assignment(prog: Program, mesh: Mesh, rules: OpRules, back: Any, pins: dict,
                by_id: dict[int, Value]) -> LayoutAssignment:
    chosen: dict[int, Reads] = {}
    while back is not None:
        i, reads, back = back
        chosen[i] = reads
    rep = replicated(mesh)
    placed: dict[Value, Spec] = {}
    reads_all: list[Reads | None] = [None] * len(prog.ops)
    outs: list[Outcome | None] = [None] * len(prog.ops)
    for i in prog.live_ops:
        op = prog.ops[i]
        if i not in chosen:  # a constant op
            reads_all[i] = ()
            outs[i] = Outcome(tuple(rep for _ in op.outputs), tuple(() for _ in op.outputs))
            continue
        reads = chosen[i]
        for v, s in zip(op.inputs, reads, strict=True):
            if v is not None and s is not None and v in prog.param_set:
                placed.setdefault(v, s)
        reads_all[i] = reads
        outs[i] = rules.apply(op, reads)
    params = tuple(pins.get(p, placed.get(p, rep)) for p in prog.fn.params)
    return LayoutAssignment(prog, mesh, params, tuple(reads_all), tuple(outs))
