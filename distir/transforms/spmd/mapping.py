"""``optimize``: per-op parallelisation at scale (Unity §5's machine mapping), by dynamic
programming over a series decomposition of the program.

For each device mesh of the device count (``(N,)`` and every 2-D factorisation), the
program is cut into segments joined by few values (``segments.decompose``: in a training
step, one layer's forward and backward ops per segment, joined by the activation and its
gradient). The search walks the segments in order keeping, per *boundary state* (the
specs of the values crossing to the next segment), the cheapest plan so far. A segment is
searched exhaustively (``segsearch.search_segment``) for each incoming state (a gradient
that a later segment makes arrives as this segment first reads it: a promise to that
segment); the result is cached by the
segment's structure (``Segment.signature``: op types, attributes, types, wiring, never
names) and the boundary specs, so the repeated layers of a deep model cost one layer's
search. States above ``prune`` times the cheapest (and beyond the ``beam`` cheapest) are
dropped.

Plans are scored by an additive time estimate (``segsearch``'s); the ``top_k`` cheapest
final plans of every mesh are lowered (``lower``) and simulated (``distir.simulate``);
the fastest whose simulated peak memory fits the card wins. Plans whose parameters alone
exceed the card are dropped during the search. Beside them, every mesh's ``dtp`` plans
(``seeds.dtp_plans``: ``dtp``'s seeds propagated) are simulated too, so the result is
never slower than those. A budget is a deadline checked before each segment; a mesh
whose search it stops keeps its seeded plans.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from distir.errors import ConfigError
from distir.ir.core import Function, Module, Value
from distir.transforms.program import Program
from distir.transforms.spmd.assignment import LayoutAssignment, is_constant_op
from distir.transforms.spmd.mesh import Mesh, Partial, Spec, replicated
from distir.transforms.spmd.propagate import program_of
from distir.transforms.spmd.rules import Outcome
from distir.transforms.spmd.segments import Decomposition, decompose
from distir.transforms.spmd.segsearch import Held, Plan, SegmentContext, search_segment

__all__ = ["optimize", "OptimizeResult", "Candidate", "meshes_for", "search_mesh",
           "mesh_candidates"]


@dataclass(frozen=True, eq=False)
class Candidate:
    """One plan: its ``assignment``, the search's ``estimate_s`` (nan for a seeded plan),
    and once simulated the lowered ``program`` and its simulation (``sim``, ``None`` until
    then). ``origin``: ``"search"``, or the ``dtp`` configuration a seeded plan reproduces
    (``"D4 T2"``, see ``spmd/seeds.py``)."""

    assignment: LayoutAssignment
    estimate_s: float
    program: Function | None = None
    sim: Any = None
    origin: str = "search"

    @property
    def simulated_s(self) -> float:
        return float("inf") if self.sim is None else float(self.sim.latency_s)

    @property
    def fits(self) -> bool:
        return self.sim is not None and not self.sim.out_of_memory


@dataclass(frozen=True, eq=False)
class OptimizeResult:
    """The best plan found: ``program`` (the lowered SPMD step, parameters placed),
    ``simulation`` (its ``distir.simulate`` result), ``assignment`` and ``mesh``;
    ``candidates`` every plan simulated, fastest first; ``seconds`` the search's wall time;
    ``stats`` counts (segments, distinct segment structures, segment searches, states)."""

    program: Function
    simulation: Any
    assignment: LayoutAssignment
    mesh: Mesh
    candidates: tuple[Candidate, ...]
    seconds: float
    stats: dict[str, Any] = field(default_factory=dict)


class OverBudget(ConfigError):
    """A mesh's search ran past the deadline (``optimize``'s ``budget_s``)."""


def meshes_for(devices: int) -> list[Mesh]:
    """``(N,)`` and every 2-D mesh ``(a, N/a)`` with ``1 < a < N``."""
    if devices < 1:
        raise ConfigError(f"devices must be at least 1, got {devices}")
    out = [Mesh.of(devices)]
    out += [Mesh.of(a, devices // a) for a in range(2, devices) if devices % a == 0]
    return out


def search_mesh(prog: Program, mesh: Mesh, hardware: Any, *, beam: int = 64,
                prune: float = 1.05, max_states: int = 2000, top_k: int = 4,
                stats: dict[str, Any] | None = None,
                deadline: float | None = None) -> list[Candidate]:
    """The ``top_k`` cheapest plans of ``prog`` on ``mesh`` by the estimate (not yet
    simulated); see the module docstring. ``deadline`` (``time.time()`` seconds): raises
    ``OverBudget`` when a segment would start after it."""
    ctx = SegmentContext(prog, mesh, hardware, max_states)
    dec = decompose(prog)
    cap = float(ctx.hw.memory_bytes)
    fixed_globals: dict[Value, Spec] = {}
    cache: dict[tuple, dict[tuple[Held, ...], tuple[float, float, Plan]]] = {}
    # boundary state (what is held of each crossing value) -> (seconds, parameter bytes,
    # back pointer)
    states: dict[tuple[Held, ...], tuple[float, float, Any]] = {(): (0.0, 0.0, None)}
    before: tuple[Value, ...] = ()
    n = len(dec.segments)
    peak = 1
    for j, seg in enumerate(dec.segments):
        if deadline is not None and time.time() > deadline:
            raise OverBudget(f"search on mesh {mesh} stopped at the budget after {j} of "
                             f"{n} segments")
        after = dec.boundaries[j] if j < n - 1 else ()
        made_here = set(seg.made_out)
        reads_here = set(seg.ext)
        new = [v for v in after if v not in before and v not in made_here]
        guessed = [v for v in new if v not in prog.param_set]
        placed_here = tuple(v for v in new if v in prog.param_set)
        nxt: dict[tuple[Held, ...], tuple[float, float, Any]] = {}
        outs = tuple(v for v in seg.made_out if v in after) + placed_here
        later = tuple(guessed)
        cont = tuple(v for v in before if v in reads_here and v in after)
        for key, (cost, mem, back) in states.items():
            spec_in = dict(zip(before, key, strict=True))
            fixed: dict[Value, Held] = {v: (s, frozenset({s})) for v, s in fixed_globals.items()}
            fixed.update((v, h) for v, h in spec_in.items() if v in reads_here)
            promised = {v: h[0] for v, h in spec_in.items() if v in made_here}
            ck = (seg.signature,
                  tuple(fixed.get(v) for v in seg.ext),
                  tuple(promised.get(v) for v in seg.made_out),
                  tuple(v in after for v in seg.made_out),
                  tuple(v in later for v in seg.ext))
            res = cache.get(ck)
            if res is None:
                res = cache[ck] = search_segment(ctx, seg, fixed, promised, outs,
                                                 cap - mem, later, cont)
            for out_key, (c, m, plan) in res.items():
                spec_out = {v: h for v, h in spec_in.items() if v in after}
                spec_out.update(zip(outs + later + cont, out_key, strict=True))
                # the last segment keeps one plan per incoming state: the top_k to simulate
                nk = tuple(spec_out[v] for v in after) if j < n - 1 else key
                total = cost + c
                old = nxt.get(nk)
                if old is None or total < old[0]:
                    nxt[nk] = (total, mem + m, (j, plan, back))
        if not nxt:
            raise ConfigError(f"no plan on mesh {mesh} fits {ctx.hw.name}'s memory "
                              f"({cap / 2**30:.0f} GiB per device)")
        best = min(c for c, _, _ in nxt.values())
        ranked = sorted(nxt.items(), key=lambda kv: kv[1][0])
        states = dict(kv for r, kv in enumerate(ranked)
                      if r < beam and (kv[1][0] <= prune * best or r < max(1, beam // 8)))
        peak = max(peak, len(nxt))
        before = after
    if stats is not None:
        stats.update(segments=n, structures=len({s.signature for s in dec.segments}),
                     segment_searches=ctx.searches, boundary_states=peak)
    finals = sorted(states.values(), key=lambda x: x[0])[:top_k]
    return [Candidate(_assignment(prog, mesh, ctx, dec, back, fixed_globals), cost)
            for cost, _, back in finals]


def _assignment(prog: Program, mesh: Mesh, ctx: SegmentContext, dec: Decomposition,
                back: Any, fixed_globals: dict[Value, Spec]) -> LayoutAssignment:
    chosen: dict[int, tuple[Spec | None, ...]] = {}
    while back is not None:
        j, plan, back = back
        for i, reads in zip(dec.segments[j].ops, plan, strict=True):
            chosen[i] = reads
    rep = replicated(mesh)
    placed: dict[Value, Spec] = dict(fixed_globals)
    reads_all: list[tuple[Spec | None, ...] | None] = [None] * len(prog.ops)
    outs: list[Outcome | None] = [None] * len(prog.ops)
    for i in prog.live_ops:
        op = prog.ops[i]
        if is_constant_op(prog, op):
            reads_all[i] = ()
            outs[i] = Outcome(tuple(rep for _ in op.outputs), tuple(() for _ in op.outputs))
            continue
        reads = chosen[i]
        for v, s in zip(op.inputs, reads, strict=True):
            if v is not None and s is not None and v in prog.param_set \
                    and not any(isinstance(p, Partial) for p in s):
                placed.setdefault(v, s)
        reads_all[i] = reads
        outs[i] = ctx.rules.apply(op, reads)
    params = tuple(placed.get(p, rep) for p in prog.fn.params)
    return LayoutAssignment(prog, mesh, params, tuple(reads_all), tuple(outs))


def optimize(fn: Function | Module | Program, devices: int, hardware: Any = "h100-sxm", *,
             meshes: list[Mesh] | None = None, batch_size: int | None = None,
             beam: int = 64, prune: float = 1.05, max_states: int = 2000,
             top_k: int = 4, budget_s: float | None = None,
             seeded: bool = True, executor: Any = None) -> OptimizeResult:
    """The fastest per-op placement plan of ``fn`` over ``devices`` devices that fits
    ``hardware``'s memory (see the module docstring). ``meshes`` overrides the meshes
    tried. ``budget_s``: once spent, no further segment is searched (the mesh being searched
    and those not yet searched keep their seeded plans only); with ``seeded``, meshes are
    searched in order of their fastest seeded plan.
    ``seeded``: also simulate, on every mesh, the plans that ``propagate`` gives from
    ``dtp``'s seeds (``spmd/seeds.py``: ``D{N}`` and ``T{N}`` on ``(N,)``, ``D{a} T{b}`` on
    ``(a, b)``), so the result is never slower than those. ``executor``: where the meshes
    are searched (``None``: here, one after another; else an object with ``map_meshes``,
    such as ``grid_search.optimize.RayMeshes``, which gives the same candidates).
    Raises ``ConfigError`` when no plan fits."""
    from distir.analysis.hardware import load_hardware

    t0 = time.perf_counter()
    deadline = None if budget_s is None else time.time() + budget_s
    hw = load_hardware(hardware)
    prog = program_of(fn)
    todo = list(meshes or meshes_for(devices))
    for mesh in todo:
        if mesh.size != devices:
            raise ConfigError(f"mesh {mesh} has {mesh.size} devices, not {devices}")
    opts: dict[str, Any] = dict(beam=beam, prune=prune, max_states=max_states, top_k=top_k)
    per_mesh: list[tuple[list[Candidate], dict[str, Any]]] = []
    if executor is None:
        analysis: list[Any] = []
        seeds = [seeded_candidates(prog, m, hw, batch_size, analysis) if seeded else []
                 for m in todo]
        # the meshes whose dtp plans are fastest are searched first: with a budget, the
        # search's time goes where it most likely pays
        order = sorted(range(len(todo)), key=lambda k: min(
            (c.simulated_s for c in seeds[k] if c.fits), default=math.inf)) \
            if seeded else list(range(len(todo)))
        found: dict[int, tuple[list[Candidate], dict[str, Any]]] = {}
        for i, k in enumerate(order):
            # without seeded plans the first mesh is searched to the end: a plan is needed
            cands, st = mesh_candidates(prog, todo[k], hw, batch_size, None, seeded=False,
                                        deadline=deadline if seeded or i else None, **opts)
            merged = _merge(cands, seeds[k])
            if merged:
                st["best_simulated_s"] = min(c.simulated_s for c in merged)
            found[k] = (merged, st)
        per_mesh = [found[k] for k in range(len(todo))]
    else:
        per_mesh = list(executor.map_meshes(prog.fn, todo, hw, batch_size,
                                            dict(opts, seeded=seeded), deadline))
    ranked_all: list[tuple[tuple, Candidate]] = []
    stats: dict[str, Any] = {"meshes": []}
    for k, (cands, st) in enumerate(per_mesh):
        stats["meshes"].append(st)
        for n, c in enumerate(cands):
            ranked_all.append(((not c.fits, c.simulated_s, k, n), c))
    ranked = tuple(c for _, c in sorted(ranked_all, key=lambda x: x[0]))
    if not ranked or not ranked[0].fits:
        raise ConfigError(f"optimize: no plan over {devices} devices fits {hw.name}'s "
                          f"memory ({hw.memory_bytes / 2**30:.0f} GiB per device)")
    best = ranked[0]
    assert best.program is not None
    return OptimizeResult(best.program, best.sim, best.assignment, best.assignment.mesh,
                          ranked, time.perf_counter() - t0, stats)


def _same_plan(a: LayoutAssignment, b: LayoutAssignment) -> bool:
    return a.params == b.params and a.reads == b.reads


def _merge(searched: list[Candidate], seeded: list[Candidate]) -> list[Candidate]:
    """The searched plans, then the seeded ones that no searched plan equals."""
    return searched + [c for c in seeded
                       if not any(_same_plan(c.assignment, s.assignment) for s in searched)]


def _simulated(a: LayoutAssignment, est: float, origin: str, hw: Any,
               batch_size: int | None) -> Candidate:
    from distir.analysis.simulator import simulate
    from distir.transforms.spmd.lower import lower

    program = lower(a)
    return Candidate(a, est, program, simulate(program, hw, batch_size), origin)


def seeded_candidates(prog: Program, mesh: Mesh, hw: Any, batch_size: int | None,
                      analysis: list[Any] | None = None) -> list[Candidate]:
    """``dtp``'s plans on ``mesh`` (``seeds.dtp_plans``), lowered and simulated.
    ``analysis``: a list holding ``analyze(prog.fn)`` once computed (shared between
    meshes)."""
    from distir.transforms.spmd.seeds import dtp_plans

    if analysis is None:
        analysis = []
    if not analysis:
        from distir.transforms.plan import analyze

        analysis.append(analyze(prog.fn))
    return [_simulated(a, math.nan, label, hw, batch_size)
            for label, a in dtp_plans(prog, mesh, analysis[0])]


def mesh_candidates(prog: Program, mesh: Mesh, hw: Any, batch_size: int | None,
                    analysis: list[Any] | None = None, *, beam: int = 64,
                    prune: float = 1.05, max_states: int = 2000, top_k: int = 4,
                    seeded: bool = True, deadline: float | None = None,
                    ) -> tuple[list[Candidate], dict[str, Any]]:
    """One mesh's share of ``optimize``: the ``top_k`` plans of the search, then (with
    ``seeded``) ``dtp``'s seeded plans that no searched plan equals, each lowered and
    simulated; and the mesh's stats. Past ``deadline`` (``time.time()`` seconds) the
    search stops and only the seeded plans remain (the stats say so)."""
    st: dict[str, Any] = {"mesh": str(mesh)}
    searched: list[Candidate] = []
    if deadline is not None and time.time() > deadline:
        st["search"] = "skipped: the budget was spent"
    else:
        try:
            searched = [_simulated(c.assignment, c.estimate_s, "search", hw, batch_size)
                        for c in search_mesh(prog, mesh, hw, beam=beam, prune=prune,
                                             max_states=max_states, top_k=top_k, stats=st,
                                             deadline=deadline)]
        except OverBudget as e:
            st["search"] = e.message
        except ConfigError as e:
            st["error"] = e.message
    out = _merge(searched, seeded_candidates(prog, mesh, hw, batch_size, analysis)
                 if seeded else [])
    if out:
        st["best_simulated_s"] = min(c.simulated_s for c in out)
    return out, st
