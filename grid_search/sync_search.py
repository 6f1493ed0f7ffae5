"""Searching how a data-parallel step synchronises its gradients (DisCo's Algorithm 1 over
all-reduce bucketings), scored by the simulator.

A *bucketing* cuts the gradients, in readiness order, into contiguous buckets; each bucket
is one ``MPIAllreduceBucket`` issued when its last gradient is ready
(``distir.transforms.synchronize``). With ``n`` gradients there are ``2^(n-1)``
bucketings: one bit per gap between neighbours, set where a new bucket starts.

The search (``sync_search``) is DisCo's backtracking search over that space:

1. the queue starts with the bucketing builders' candidates (one all-reduce per gradient,
   DDP's buckets, merge-all, chunks of 2, 4, 8, ... gradients), each simulated;
2. each step takes the cheapest candidate off the queue and simulates up to ``beta`` of
   its neighbours not yet simulated (one gap toggled: two neighbouring buckets merged, or
   one bucket split), drawn at random; a neighbour faster than the best so far becomes the
   best; one within ``alpha`` times the best joins the queue (the rest are pruned);
3. it stops when the queue is empty, after ``patience`` steps in a row that did not
   improve the best, or after ``max_evals`` simulations.

The defaults are the issue's: ``alpha`` 1.05, ``beta`` 10, ``patience`` 1,000. The result
also simulates the builders that are not bucketings (parameter server, load-balanced PS,
ZeRO-1/2) and reports the fastest of everything, so it is never slower than any builder
in simulation. Everything here is simulated; nothing is measured.
"""

from __future__ import annotations

import heapq
import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from distir.analysis.hardware import Hardware, load_hardware
from distir.analysis.simulator import simulate
from distir.errors import ConfigError
from distir.ir.core import Function, Module
from distir.transforms.synchronize import (
    VarSync,
    gradients,
    resolve,
    synchronize,
)

__all__ = ["SyncSearchResult", "sync_search", "builder_strategies", "bucketing_plan", "describe"]

Cuts = tuple[bool, ...]
"""One bit per gap between gradients ``i`` and ``i + 1`` (readiness order): a new bucket
starts at ``i + 1``."""


def bucketing_plan(cuts: Cuts, compress: str | None = None) -> tuple[VarSync, ...]:
    """The all-reduce plan of a bucketing: bucket ids in readiness order."""
    g = 0
    plan = [VarSync("allreduce", group=0, compress=compress)]
    for c in cuts:
        g += c
        plan.append(VarSync("allreduce", group=g, compress=compress))
    return tuple(plan)


def _cuts_of(plan: Sequence[VarSync]) -> Cuts | None:
    """The bucketing of a plan, or ``None`` when it is not one (PS, ZeRO, or buckets that
    are not contiguous in readiness order)."""
    if any(p.kind != "allreduce" for p in plan):
        return None
    cuts = tuple(a.group != b.group for a, b in zip(plan, plan[1:]))
    if len({p.group for p in plan}) != sum(cuts) + 1:
        return None
    return cuts


def builder_strategies(n: int, compress: str | None = None) -> dict[str, dict[str, Any]]:
    """Every builder by display name, for ``n`` gradients."""
    extra: dict[str, Any] = {"compress": compress} if compress else {}
    out: dict[str, dict[str, Any]] = {
        "per-gradient": {"builder": "per-gradient", **extra},
        "ddp": {"builder": "ddp", **extra},
        "merge-all": {"builder": "merge-all", **extra},
    }
    k = 2
    while k < n:
        out[f"chunk-{k}"] = {"builder": "chunk", "k": k, **extra}
        k *= 2
    for b in ("ps", "ps-lb", "zero-1", "zero-2"):
        out[b] = {"builder": b, **extra}
    return out


@dataclass(frozen=True)
class SyncSearchResult:
    """What ``sync_search`` found, in simulated seconds per step on ``hardware``.

    ``best`` is the fastest plan seen (``best_from``: ``"search"`` or a builder's name),
    ``builders`` each builder's step time; ``evaluated`` counts simulations, ``steps``
    the queue steps, ``seconds`` the wall time of the search."""

    hardware: str
    best: tuple[VarSync, ...]
    best_s: float
    best_from: str
    builders: dict[str, float]
    gradient_bytes: tuple[int, ...]
    evaluated: int
    steps: int
    seconds: float
    stopped: str
    params: dict[str, Any] = field(default_factory=dict)

    def strategy(self) -> dict[str, Any]:
        """The best plan as a strategy for ``synchronize`` (JSON-able)."""
        return {"variables": [p.to_json() for p in self.best]}

    def buckets(self) -> list[list[int]] | None:
        """The best plan's buckets (gradient indices), when it is a bucketing."""
        cuts = _cuts_of(self.best)
        if cuts is None:
            return None
        out: list[list[int]] = [[0]]
        for i, c in enumerate(cuts, 1):
            if c:
                out.append([])
            out[-1].append(i)
        return out

    def gain_over(self, name: str) -> float:
        """How much faster the best is than builder ``name``: its time / best - 1."""
        return self.builders[name] / self.best_s - 1.0

    def to_dict(self) -> dict[str, Any]:
        return {"hardware": self.hardware, "best_s": self.best_s, "best_from": self.best_from,
                "strategy": self.strategy(), "buckets": self.buckets(),
                "builders_s": dict(self.builders),
                "gain_over": {k: self.gain_over(k) for k in self.builders},
                "gradient_bytes": list(self.gradient_bytes), "evaluated": self.evaluated,
                "steps": self.steps, "seconds": self.seconds, "stopped": self.stopped,
                "params": dict(self.params)}


class _Scorer:
    """Simulated step time of a plan, memoized by plan (``inf`` when out of memory)."""

    def __init__(self, fn: Function, hw: Hardware) -> None:
        self.fn, self.hw = fn, hw
        self.memo: dict[tuple[VarSync, ...], float] = {}

    def __call__(self, plan: tuple[VarSync, ...]) -> float:
        t = self.memo.get(plan)
        if t is None:
            sim = simulate(synchronize(self.fn, plan), self.hw)
            t = math.inf if sim.out_of_memory else sim.latency_s
            self.memo[plan] = t
        return t


def sync_search(fn: Function | Module, hardware: str | Hardware = "h200-sxm", *,
                alpha: float = 1.05, beta: int = 10, patience: int = 1000,
                max_evals: int | None = None, seed: int = 0,
                compress: str | None = None) -> SyncSearchResult:
    """Search the all-reduce bucketings of ``fn`` (a data-parallel training step) by
    DisCo's Algorithm 1 (module docstring), and simulate every builder. ``compress``
    (``"fp16"``/``"bf16"``) compresses every candidate's gradients alike."""
    if not alpha >= 1.0 or beta < 1 or patience < 1 or (max_evals is not None
                                                        and max_evals < 1):
        raise ConfigError(f"sync_search: need alpha >= 1, beta >= 1, patience >= 1 and "
                          f"max_evals >= 1, got alpha={alpha}, beta={beta}, "
                          f"patience={patience}, max_evals={max_evals}")
    f = fn.entry if isinstance(fn, Module) else fn
    hw = hardware if isinstance(hardware, Hardware) else load_hardware(hardware)
    t0 = time.perf_counter()
    grads = gradients(f)
    n = len(grads)
    score = _Scorer(f, hw)
    builders: dict[str, float] = {}
    plans: dict[str, tuple[VarSync, ...]] = {}
    for name, strat in builder_strategies(n, compress).items():
        plans[name] = resolve(grads, strat)
        builders[name] = score(plans[name])
    rng = random.Random(seed)
    queue: list[tuple[float, int, Cuts]] = []
    seen: set[Cuts] = set()
    best_cuts: Cuts | None = None
    best_t = math.inf
    for plan in plans.values():
        cuts = _cuts_of(plan)
        if cuts is None or cuts in seen:
            continue
        seen.add(cuts)
        t = score(bucketing_plan(cuts, compress))
        heapq.heappush(queue, (t, len(seen), cuts))
        if t < best_t:
            best_t, best_cuts = t, cuts
    steps = still = 0
    stopped = "queue empty"
    while queue:
        if still >= patience:
            stopped = f"{patience} steps without improvement"
            break
        if max_evals is not None and len(score.memo) >= max_evals:
            stopped = f"{max_evals} simulations"
            break
        _, _, cuts = heapq.heappop(queue)
        steps += 1
        improved = False
        gaps = list(range(len(cuts)))
        rng.shuffle(gaps)
        tried = 0
        for gap in gaps:
            if tried >= beta:
                break
            nb = cuts[:gap] + (not cuts[gap],) + cuts[gap + 1:]
            if nb in seen:
                continue
            seen.add(nb)
            tried += 1
            t = score(bucketing_plan(nb, compress))
            if t < best_t:
                best_t, best_cuts, improved = t, nb, True
            if t < alpha * best_t:
                heapq.heappush(queue, (t, len(seen), nb))
        still = 0 if improved else still + 1
    assert best_cuts is not None
    best_plan, best_from = bucketing_plan(best_cuts, compress), "search"
    for name in builders:  # a builder that is not a bucketing may still be faster
        if builders[name] < best_t:
            best_t, best_plan, best_from = builders[name], plans[name], name
    return SyncSearchResult(hw.name, best_plan, best_t, best_from, builders,
                            tuple(g.nbytes for g in grads), len(score.memo), steps,
                            time.perf_counter() - t0, stopped,
                            {"alpha": alpha, "beta": beta, "patience": patience,
                             "max_evals": max_evals, "seed": seed, "compress": compress})


def _size(n: float) -> str:
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n / k:,.1f} {unit}"
    return f"{int(n)} B"


def describe(result: SyncSearchResult) -> str:
    """The human-readable report of a search."""
    lines = [f"simulated on {result.hardware}: {len(result.gradient_bytes)} gradients, "
             f"{_size(sum(result.gradient_bytes))} per replica"]
    b = result.buckets()
    if b is not None:
        sizes = [_size(sum(result.gradient_bytes[i] for i in bk)) for bk in b]
        desc = ", ".join(f"[{bk[0]}..{bk[-1]}] {s}" if len(bk) > 1 else f"[{bk[0]}] {s}"
                         for bk, s in zip(b, sizes))
        lines.append(f"best: {len(b)} bucket{'s' * (len(b) != 1)} ({result.best_from}): "
                     f"{desc}")
    else:
        lines.append(f"best: builder {result.best_from}")
    lines.append(f"step  {result.best_s * 1e3:.3f} ms")
    lines.append("")
    width = max(len(k) for k in result.builders)
    lines.append(f"{'builder'.ljust(width)}  {'step':>12}  best is faster by")
    for name, t in result.builders.items():
        gain = result.gain_over(name)
        lines.append(f"{name.ljust(width)}  {t * 1e3:>9.3f} ms  {100 * gain:6.2f}%")
    lines.append("")
    lines.append(f"{result.evaluated} simulations, {result.steps} search steps, "
                 f"{result.seconds:.1f} s; stopped: {result.stopped}")
    return "\n".join(lines) + "\n"
