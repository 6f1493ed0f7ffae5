"""Programs that write one of several identical data-parallel replicas, and their
simulation expanded to every replica.

With ``dp`` replicas, a D/T/P/K program repeats the same ops ``dp`` times, each replica on
its own ``pp·tp`` devices (replica ``r`` on devices ``r·stride ... r·stride + stride - 1``),
and the replicas meet only in the all-reduces of the gradients. ``dtp_replica`` writes
replica 0 alone, each such all-reduce as its part of one (``ReplicaAllreduce`` over the
devices of every replica's copy), and returns a ``ReplicaProgram``. Its simulation is the
whole program's (memory exactly, times to rounding) where the replicas run alike: every
replica's ops take the same times in the same order, so each replica's copy of an
all-reduce is ready when replica 0's is, and the all-reduce, timed over all its devices,
ends on all of them together. Replica ``r``'s per-device figures are then replica 0's on
the shifted devices, and the trace is replica 0's repeated (``expand``). So a search's
cost no longer grows with ``dp``.

The replicas run alike when the cost of every op of a replica is the same on every
replica's devices: the machine's nodes hold whole replicas or a whole number of them
(``stride`` a multiple of ``devices_per_node`` or a divisor of it, or one node holds all
the replicas), so a transfer between two stages crosses a node boundary on every replica
or on none. ``check`` refuses other machines with the fix: simulate the program of every
replica (``dtp``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from distir.errors import SimulationError
from distir.ir.core import Function

if TYPE_CHECKING:
    from distir.analysis.hardware import Hardware
    from distir.analysis.simulator import Simulation

__all__ = ["ReplicaProgram", "REPLICA_OPS", "replica_program", "replicas_run_alike",
           "expand_replica_events"]

REPLICA_OPS = frozenset({"ReplicaAllreduce"})
"""Ops of a replica program that stand for one collective over every replica."""


@dataclass(frozen=True, eq=False)
class ReplicaProgram:
    """Replica 0's program (``fn``) of ``replicas`` identical replicas, replica ``r`` running
    it on its devices shifted by ``r * stride``. ``distir.simulate`` (and
    ``Simulator.simulate_function``) simulate it as the program of every replica."""

    fn: Function
    replicas: int
    stride: int

    @property
    def name(self) -> str:
        return self.fn.name

    def num_ops(self, *, inline_calls: bool = False) -> int:
        """The ops of the program of every replica (one ``MPIAllreduce`` for the copies of
        a ``ReplicaAllreduce``)."""
        total = self.fn.num_ops(inline_calls=inline_calls)
        shared = _count(self.fn, inline_calls, {})
        return self.replicas * (total - shared) + shared

    def check(self, hw: Hardware) -> None:
        """Refuse, in one line, a machine on which the replicas would not run alike."""
        per = hw.devices_per_node
        if not replicas_run_alike(hw, self.replicas, self.stride):
            raise SimulationError(
                f"the {self.replicas} replicas of @{self.fn.name} ({self.stride} devices "
                f"each) do not run alike on {hw.name} ({per} devices per node: some "
                "replicas straddle a node boundary): simulate the program of every "
                "replica (dtp) instead of replica 0's (dtp_replica)")

    def shift(self, d: int, r: int) -> int:
        """Replica ``r``'s copy of replica 0's device ``d``."""
        return d + r * self.stride

    def expand(self, sim: Simulation) -> Simulation:
        """Replica 0's simulation made the simulation of every replica."""
        own = sim.devices
        if own and max(own) >= self.stride:
            raise SimulationError(
                f"@{self.fn.name} places values on device {max(own)}, outside replica 0's "
                f"devices 0-{self.stride - 1}: it is not one replica's program")
        n = self.replicas
        shared = _count(self.fn, True, {})

        def per(x: dict[int, Any]) -> dict[int, Any]:
            return {self.shift(d, r): v for r in range(n) for d, v in x.items()}

        return replace(
            sim, devices=tuple(self.shift(d, r) for r in range(n) for d in own),
            busy_s=per(sim.busy_s), compute_s=per(sim.compute_s), comm_s=per(sim.comm_s),
            idle_s=per(sim.idle_s), peak_memory_bytes=per(sim.peak_memory_bytes),
            host_s=per(sim.host_s),
            num_ops=n * (sim.num_ops - shared) + shared, replicas=(n, self.stride))


def replica_program(fn: Function) -> ReplicaProgram | None:
    """``fn`` as the replica program its ``ReplicaAllreduce`` ops describe (each lists the
    devices of every replica's copy: ``d, d + stride, ..., d + (replicas - 1)·stride``, with
    ``d`` its input's device), or ``None`` when it has none: a replica program read from a
    file simulates as the program of every replica. Groups that disagree are a one-line
    ``SimulationError``."""
    found: tuple[int, int] | None = None
    seen: set[int] = set()
    todo = [fn]
    while todo:
        f = todo.pop()
        if id(f) in seen:
            continue
        seen.add(id(f))
        for op in f.ops:
            if op.callee is not None:
                todo.append(op.callee)
            elif op.op_type in REPLICA_OPS:
                devs: Any = op.attrs["devices"]
                g = [int(d) for d in devs]
                stride = g[1] - g[0] if len(g) > 1 else 0
                ok = len(g) > 1 and stride > 0 and all(
                    b - a == stride for a, b in zip(g, g[1:])) and g[0] < stride
                if not ok or (found is not None and found != (len(g), stride)):
                    want = "" if found is None else (f"; others are {found[0]} replicas "
                                                     f"{found[1]} devices apart")
                    raise SimulationError(
                        f"ReplicaAllreduce(devices={g}) in @{f.name} does not list one "
                        f"device per replica, replicas equally far apart from replica 0's"
                        f"{want}: write each as d, d + stride, ... (dtp_replica does)")
                found = (len(g), stride)
    return None if found is None else ReplicaProgram(fn, *found)


def replicas_run_alike(hw: Hardware, replicas: int, stride: int) -> bool:
    """Whether ``replicas`` replicas of ``stride`` devices each (replica ``r`` on devices
    ``r·stride ...``) take the same times on ``hw``: one node holds them all, or each
    node whole replicas, or each replica whole nodes."""
    per = hw.devices_per_node
    return (replicas <= 1 or replicas * stride <= per or stride % per == 0
            or per % stride == 0)


def _count(fn: Function, inline: bool, memo: dict[int, int]) -> int:
    """``ReplicaAllreduce`` ops of ``fn`` (with ``inline``, of its callees per call)."""
    n = memo.get(id(fn))
    if n is None:
        n = 0
        for op in fn.ops:
            if op.callee is not None:
                if inline:
                    n += _count(op.callee, inline, memo)
            elif op.op_type in REPLICA_OPS:
                n += 1
        memo[id(fn)] = n
    return n


def expand_replica_events(events: list[tuple], replicas: int, stride: int) -> list[tuple]:
    """Replica 0's expanded events (``expand_events``) as every replica's: each event on
    each replica's devices, a ``ReplicaAllreduce`` once, on every replica's devices (as the
    ``MPIAllreduce`` of the program of every replica). Sorted by start time (stable)."""
    from distir.analysis.renaming import rename_detail

    out: list[tuple] = []
    for ev in events:
        start, dur, devs, op, detail, fname = ev
        if op.op_type in REPLICA_OPS:
            out.append((start, dur, tuple(op.attrs["devices"]), op, detail, fname))
            continue
        out.append(ev)
        for r in range(1, replicas):
            m = {d: d + r * stride for d in devs}
            out.append((start, dur, tuple(m.values()), op, rename_detail(detail, m), fname))
    out.sort(key=lambda e: e[0])
    return out
