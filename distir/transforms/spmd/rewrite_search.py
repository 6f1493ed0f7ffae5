"""Substitution selection by backtracking (Unity §5), over the machine-mapping search.

Starting from the program, every site of every substitution is rewritten; each new graph
(memoized by ``structural_hash``: op types, attributes and wiring, never names) is scored
by ``optimize`` (the per-op placement search, lowered and simulated). Graphs are expanded
cheapest first, to ``depth`` substitutions; a graph whose simulated step is more than
``prune`` (1.05) times the best so far is not expanded. The search stops when no graph is
left to expand, after ``max_candidates`` graphs scored, or once ``budget_s`` is spent (the
unrewritten program is always scored).

``derive`` makes the substitutions act on a forward program while a derived one is scored
(``derive=lambda f: training_step(f, ...)``): the backward pass then follows the rewritten
forward (a fused product gets one weight-gradient product and one all-reduce). Without it,
rules rewrite the given program as is: in a training step the forward products change and
their gradients' ops (``MatMulGrad``) stay as they were, which is equivalent but not
symmetric.
"""

from __future__ import annotations

import dataclasses
import heapq
import time
from collections.abc import Callable
from typing import Any

from distir.errors import ConfigError, DistIRError
from distir.ir.core import Function, Module
from distir.transforms.spmd.mapping import OptimizeResult, optimize
from distir.transforms.spmd.subst_core import Graph, structural_hash
from distir.transforms.spmd.substitutions import by_name, find_sites

__all__ = ["optimize_with_substitutions"]


def optimize_with_substitutions(
        fn: Function | Module, devices: int, hardware: Any = "h100-sxm", *,
        substitutions: list[str] | tuple[str, ...] | None = None,
        derive: Callable[[Function], Function] | None = None, depth: int = 2,
        prune: float = 1.05, budget_s: float | None = 120.0, max_candidates: int = 64,
        reuse_mesh: bool = False, **optimize_kwargs: Any) -> OptimizeResult:
    """The fastest plan over the program and its rewrites (see the module docstring).

    Returns ``optimize``'s ``OptimizeResult`` for the best graph, with ``seconds`` the whole
    search's wall time and ``stats`` extended by ``substitutions`` (the rules applied, in
    order, each ``"name at ops"``), ``sequential`` (the rewritten sequential program that
    was distributed, after ``derive``) and ``rewrite_search`` (graphs scored, the
    unrewritten program's simulated seconds, whether the budget or ``max_candidates``
    stopped it, and ``trace``: every scored graph's simulated seconds and rewrites, in
    the order scored).
    ``substitutions`` names the rules to try (all by default); ``optimize_kwargs`` go to
    ``optimize`` (``meshes``, ``beam``, ``max_states``, ``top_k``, ``batch_size``).
    ``reuse_mesh`` scores the rewritten programs only on the mesh of the unrewritten
    program's best plan (faster by the number of meshes; a rewrite that would be best on
    another mesh is missed)."""
    if depth < 0 or max_candidates < 1 or prune < 1.0:
        raise ConfigError(f"optimize_with_substitutions: depth {depth}, max_candidates "
                          f"{max_candidates}, prune {prune}: give depth >= 0, "
                          "max_candidates >= 1, prune >= 1")
    if budget_s is not None and budget_s <= 0:
        raise ConfigError(f"optimize_with_substitutions: budget_s {budget_s}: give a "
                          "positive number of seconds or None")
    subs = by_name(substitutions)
    t0 = time.perf_counter()
    start = fn.entry if isinstance(fn, Module) else fn

    def score(g: Function) -> tuple[Function, OptimizeResult]:
        prog = derive(g) if derive is not None else g
        return prog, optimize(prog, devices, hardware, **optimize_kwargs)

    seq, base = score(start)
    if reuse_mesh:
        optimize_kwargs = {**optimize_kwargs, "meshes": [base.mesh]}
    best: tuple[float, Function, OptimizeResult, tuple[str, ...]] = (
        base.simulation.latency_s, seq, base, ())
    seen = {structural_hash(start)}
    tick = 0
    queue: list[tuple[float, int, Function, tuple[str, ...]]] = [
        (best[0], tick, start, ())]
    scored, stopped = 1, False
    trace: list[tuple[float, tuple[str, ...]]] = [(best[0], ())]
    while queue and not stopped:
        cost, _, g, applied = heapq.heappop(queue)
        if len(applied) >= depth or cost > prune * best[0]:
            continue
        graph = Graph(g)
        for sub, site in find_sites(graph, subs):
            if scored >= max_candidates or (
                    budget_s is not None and time.perf_counter() - t0 > budget_s):
                stopped = True
                break
            try:
                new = sub.apply(graph, site)
            except DistIRError:
                continue  # a site whose rewrite does not type-check here is skipped
            h = structural_hash(new)
            if h in seen:
                continue
            seen.add(h)
            try:
                prog, res = score(new)
            except DistIRError:
                continue  # no plan fits, or the derived program cannot be built
            scored += 1
            c = res.simulation.latency_s
            steps = (*applied, f"{sub.name} at {site.describe(graph)}")
            trace.append((c, steps))
            if c < best[0]:
                best = (c, prog, res, steps)
            if c <= prune * best[0]:
                tick += 1
                heapq.heappush(queue, (c, tick, new, steps))
    _, prog, res, steps = best
    stats = dict(res.stats)
    stats.update(substitutions=list(steps), sequential=prog,
                 rewrite_search={"scored": scored, "baseline_s": base.simulation.latency_s,
                                 "stopped_early": stopped, "trace": trace})
    return dataclasses.replace(res, seconds=time.perf_counter() - t0, stats=stats)
