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
also simulates the builders that are not bucketings (parameter server, load-balanced and
partitioned PS, ZeRO-1/2, and the hierarchical all-reduce where the replicas span nodes)
and reports the fastest of everything, so it is never slower than any builder in
simulation.

With ``samples`` > 0 it then runs AutoDist's guided sampling over *per-variable*
strategies (``guided_sampling``): each sample changes a few variables of the best plan so
far (or of one of the three best builders' plans) to a kind drawn from a prior that the
builders' simulated times set (a kind whose builder is within a few percent of the best
is drawn most), and keeps the sample if the simulator says it is faster. Everything here
is simulated; nothing is measured.
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
from distir.errors import ConfigError, TransformError
from distir.ir.core import Function, Module
from distir.transforms.synchronize import (
    Gradient,
    VarSync,
    gradients,
    resolve,
    servers,
    synchronize,
    with_updates_inlined,
)

__all__ = ["SyncSearchResult", "sync_search", "builder_strategies", "bucketing_plan", "describe",
           "guided_sampling", "searched_step"]

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


def builder_strategies(n: int, compress: str | None = None, node_size: int | None = None,
                       ) -> dict[str, dict[str, Any]]:
    """Every builder by display name, for ``n`` gradients (``hierarchical`` only with a
    ``node_size``: the replicas span nodes of that many devices)."""
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
    for b in ("ps", "ps-lb", "partitioned-ps", "zero-1", "zero-2"):
        out[b] = {"builder": b, **extra}
    if node_size:
        out["hierarchical"] = {"builder": "hierarchical", "node_size": node_size, **extra}
    return out


def _node_size(grads: Sequence[Gradient], hw: Hardware) -> int | None:
    """The profile's devices per node where the replicas span several nodes."""
    per = hw.devices_per_node
    return per if len({d // per for d in grads[0].devices}) > 1 else None


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
    """Simulated step time of a plan, memoized by plan (``inf`` when out of memory or when
    the plan does not fit the program, e.g. a bucket read before its last member is
    ready). ``simulator``: a ``Simulator`` to share (the grid search's), else one per
    simulation."""

    def __init__(self, fn: Function, hw: Hardware, simulator: Any = None) -> None:
        self.fn, self.hw, self.simulator = fn, hw, simulator
        self.memo: dict[tuple[VarSync, ...], float] = {}

    def __call__(self, plan: tuple[VarSync, ...]) -> float:
        t = self.memo.get(plan)
        if t is None:
            try:
                prog = synchronize(self.fn, plan)
            except TransformError:
                self.memo[plan] = math.inf
                return math.inf
            if self.simulator is not None:
                sim = self.simulator.simulate_function(prog)
            else:
                sim = simulate(prog, self.hw)
            t = math.inf if sim.out_of_memory else sim.latency_s
            self.memo[plan] = t
        return t


def sync_search(fn: Function | Module, hardware: str | Hardware = "h200-sxm", *,
                alpha: float = 1.05, beta: int = 10, patience: int = 1000,
                max_evals: int | None = None, seed: int = 0,
                compress: str | None = None, samples: int = 0,
                simulator: Any = None) -> SyncSearchResult:
    """Search the all-reduce bucketings of ``fn`` (a data-parallel training step) by
    DisCo's Algorithm 1 (module docstring), simulate every builder, then (``samples`` >
    0) sample per-variable strategies by AutoDist's guided sampling. ``compress``
    (``"fp16"``/``"bf16"``) compresses every candidate's gradients alike; ``simulator``
    (a ``Simulator`` of ``hardware``) is shared instead of one per simulation."""
    if not alpha >= 1.0 or beta < 1 or patience < 1 or (max_evals is not None
                                                        and max_evals < 1) or samples < 0:
        raise ConfigError(f"sync_search: need alpha >= 1, beta >= 1, patience >= 1, "
                          f"max_evals >= 1 and samples >= 0, got alpha={alpha}, beta={beta}, "
                          f"patience={patience}, max_evals={max_evals}, samples={samples}")
    f = with_updates_inlined(fn.entry if isinstance(fn, Module) else fn)
    hw = hardware if isinstance(hardware, Hardware) else load_hardware(hardware)
    t0 = time.perf_counter()
    grads = gradients(f)
    n = len(grads)
    score = _Scorer(f, hw, simulator)
    builders: dict[str, float] = {}
    plans: dict[str, tuple[VarSync, ...]] = {}
    for name, strat in builder_strategies(n, compress, _node_size(grads, hw)).items():
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
    if samples:
        g_plan, g_t = guided_sampling(grads, hw, score, builders, plans, best_plan, best_t,
                                      samples=samples, seed=seed, compress=compress)
        if g_t < best_t:
            best_t, best_plan, best_from = g_t, g_plan, "guided"
    return SyncSearchResult(hw.name, best_plan, best_t, best_from, builders,
                            tuple(g.nbytes for g in grads), len(score.memo), steps,
                            time.perf_counter() - t0, stopped,
                            {"alpha": alpha, "beta": beta, "patience": patience,
                             "max_evals": max_evals, "seed": seed, "compress": compress,
                             "samples": samples})


# -- AutoDist's guided sampling over per-variable strategies -------------------------------

_KIND_OF = {"ps": "ps", "ps-lb": "ps", "partitioned-ps": "partitioned", "zero-1": "zero",
            "zero-2": "zero", "hierarchical": "hierarchical"}
"""The per-variable kind each builder stands for (the others are all-reduce bucketings)."""

TAU = 0.05
"""Temperature of the sampling prior: a kind whose best builder is ``x`` times slower than
the best builder is drawn with weight ``exp(-(x - 1) / TAU)``."""


def _normal(plan: Sequence[VarSync]) -> tuple[VarSync, ...]:
    """Group ids renumbered by first appearance (equal plans memoize alike)."""
    ids: dict[int, int] = {}
    out = []
    for p in plan:
        if p.kind == "allreduce":
            p = VarSync("allreduce", group=ids.setdefault(p.group, len(ids)),
                        compress=p.compress)
        out.append(p)
    return tuple(out)


def guided_sampling(grads: Sequence[Gradient], hw: Hardware,
                    score: Any, builders: dict[str, float],
                    plans: dict[str, tuple[VarSync, ...]], start: tuple[VarSync, ...],
                    start_t: float, *, samples: int, seed: int = 0,
                    compress: str | None = None) -> tuple[tuple[VarSync, ...], float]:
    """AutoDist's guided sampling (module docstring): ``samples`` per-variable plans, each
    a few variables of a base plan changed, the kinds drawn from a prior set by the
    builders' simulated times; the fastest plan seen and its time. ``score`` simulates a
    plan (``inf`` for one that does not fit the program)."""
    rng = random.Random(seed)
    best_b = min(builders.values())
    prior: dict[str, float] = {}
    for name, t in builders.items():
        kind = _KIND_OF.get(name, "allreduce")
        w = math.exp(-(t / best_b - 1.0) / TAU) if math.isfinite(t) else 0.0
        prior[kind] = max(prior.get(kind, 0.0), w)
    kinds = [k for k, w in prior.items() if w > 0]
    weights = [prior[k] for k in kinds]
    stage = 1 if builders.get("zero-1", math.inf) < builders.get("zero-2", math.inf) else 2
    node_size = _node_size(grads, hw)
    top = sorted((t, name) for name, t in builders.items())[:3]
    best, best_t = tuple(start), start_t
    n = len(grads)

    def choose(plan: list[VarSync], i: int, kind: str) -> VarSync | None:
        gr = grads[i]
        devices = gr.devices
        load: dict[int, int] = {}
        for g, p in zip(grads, plan):
            if p.kind == "ps":
                for d in servers(g, p):
                    load[d] = load.get(d, 0) + g.nbytes // p.shards
        least = min(devices, key=lambda d: (load.get(d, 0), d))
        shardable = bool(gr.sharded) and gr.type.rank > 0
        if kind == "allreduce":
            near = [plan[j].group for j in (i - 1, i + 1)
                    if 0 <= j < n and plan[j].kind == "allreduce"]
            grp = rng.choice(near) if near and rng.random() < 0.5 else n + i + 1000
            return VarSync("allreduce", group=grp, compress=compress)
        if kind == "ps":
            return VarSync("ps", device=least, compress=compress)
        if kind == "partitioned":
            if not shardable or gr.type.shape[0] % len(devices):
                return None
            return VarSync("ps", device=least, shards=len(devices), compress=compress)
        if kind == "zero":
            if not shardable or gr.type.shape[0] % len(devices):
                return None
            return VarSync("zero", stage=stage, compress=compress)
        if kind == "hierarchical" and node_size:
            return VarSync("hierarchical", node_size=node_size, compress=compress)
        return None

    for _ in range(samples):
        base = best if rng.random() < 0.7 or not top else plans[rng.choice(top)[1]]
        plan = list(base)
        m = 1
        while m < n and rng.random() < 0.5:
            m += 1
        for i in rng.sample(range(n), m):
            new = choose(plan, i, rng.choices(kinds, weights)[0])
            if new is not None:
                plan[i] = new
        cand = _normal(plan)
        t = score(cand)
        if t < best_t:
            best, best_t = cand, t
    return best, best_t


GRID_BUDGET = {"max_evals": 60, "patience": 10, "samples": 30}
"""The search budget of ``grid-search --sync searched`` per configuration (simulations)."""


def searched_step(fn: Function, hw: Hardware, simulator: Any = None,
                  ) -> tuple[Function, str]:
    """``fn`` (a data-parallel step) with its gradients synchronised by the strategy
    ``sync_search`` finds within ``GRID_BUDGET``, and a note naming it; ``fn`` itself and
    the reason where ``synchronize`` cannot take the program (no gradient all-reduce)."""
    try:
        res = sync_search(fn, hw, simulator=simulator, **GRID_BUDGET)  # type: ignore[arg-type]
        return synchronize(fn, res.best), f"sync: {res.best_from}"
    except TransformError as e:
        return fn, f"sync: not searched ({e.message})"


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
