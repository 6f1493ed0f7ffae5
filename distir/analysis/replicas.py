"""Programs that write one of several identical copies (data-parallel replicas,
tensor-parallel ranks), and their simulation expanded to every copy.

With ``dp`` replicas, a D/T/P/K program repeats the same ops ``dp`` times, each replica on
its own ``pp·tp`` devices (replica ``r`` on devices ``r·stride ... r·stride + stride - 1``),
and the replicas meet only in the all-reduces of the gradients. Within a replica, the
``tp`` tensor-parallel ranks of a stage (on adjacent devices ``d, d + 1, ..., d + tp - 1``)
run the same ops on their shards and meet only in their collectives. ``dtp_replica``
writes rank 0 of replica 0 alone (devices ``s·tp`` of each stage ``s``): each all-reduce
(or all-gather) over the replicas as its part of one (``ReplicaAllreduce``,
``ReplicaAllgather``: over the devices of every replica's copy), each collective of the
ranks as rank 0's part of one (``PeerAllreduce``, ``PeerAllgather``: over the input's
device and the ``peers - 1`` next ones), and returns a ``ReplicaProgram``. Where the
ranks would not run alike (an op that only rank 0 runs), it writes every rank, and
``peers`` is 1.

Its simulation is the whole program's (memory exactly, times to rounding) where the copies
run alike: every copy's ops take the same times in the same order, so each copy's part of
a collective is ready when the written one's is, and the collective, timed over all its
devices, ends on all of them together. The figures of copy ``(r, t)`` are then those of
the written devices shifted by ``r·stride + t``, and the trace is the written one's
repeated (``expand``): an event of a ``Peer*`` collective once per replica, on the devices
of every rank; of a ``Replica*`` op once per rank, on the devices of every replica;
any other once per copy. So a search's cost grows with neither ``dp`` nor ``tp``.

The copies run alike when the cost of every op of a copy is the same on every copy's
devices: the machine's nodes hold whole replicas or a whole number of them (``stride`` a
multiple of ``devices_per_node`` or a divisor of it, or one node holds all the replicas),
and likewise whole groups of ranks (``peers`` a divisor or a multiple of
``devices_per_node``), so a transfer between two stages crosses a node boundary on every
copy or on none. ``check`` refuses other machines with the fix: simulate the program of
every copy (``dtp``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from distir.errors import SimulationError
from distir.ir.core import Function

if TYPE_CHECKING:
    from distir.analysis.hardware import Hardware
    from distir.analysis.simulator import Simulation

__all__ = ["ReplicaProgram", "REPLICA_OPS", "PEER_OPS", "replica_program",
           "replicas_run_alike", "peers_run_alike", "expand_replica_events"]

REPLICA_OPS = frozenset({"ReplicaAllreduce", "ReplicaAllgather"})
"""Ops of a replica program that stand for one collective over every replica."""

PEER_OPS = frozenset({"PeerAllreduce", "PeerAllgather"})
"""Ops of a replica program that stand for one collective over every tensor-parallel
rank (``peers`` adjacent devices, the written one first)."""


@dataclass(frozen=True, eq=False)
class ReplicaProgram:
    """The program (``fn``) of rank 0 of replica 0 of ``replicas`` identical replicas of
    ``peers`` identical ranks each: rank ``t`` of replica ``r`` runs it on its devices
    shifted by ``r * stride + t``. ``distir.simulate`` (and
    ``Simulator.simulate_function``) simulate it as the program of every copy."""

    fn: Function
    replicas: int
    stride: int
    peers: int = 1

    @property
    def name(self) -> str:
        return self.fn.name

    def num_ops(self, *, inline_calls: bool = False) -> int:
        """The ops of the program of every copy (one ``MPIAllreduce`` for the copies of
        a ``Replica*`` op, one collective for those of a ``Peer*`` op)."""
        return _every_copy(self.fn.num_ops(inline_calls=inline_calls),
                           _count(self.fn, inline_calls, {}), self.replicas, self.peers)

    def check(self, hw: Hardware) -> None:
        """Refuse, in one line, a machine on which the copies would not run alike."""
        per = hw.devices_per_node
        if not replicas_run_alike(hw, self.replicas, self.stride):
            raise SimulationError(
                f"the {self.replicas} replicas of @{self.fn.name} ({self.stride} devices "
                f"each) do not run alike on {hw.name} ({per} devices per node: some "
                "replicas straddle a node boundary): simulate the program of every "
                "replica (dtp) instead of replica 0's (dtp_replica)")
        if not peers_run_alike(hw, self.peers):
            raise SimulationError(
                f"the {self.peers} tensor-parallel ranks of @{self.fn.name} do not run alike "
                f"on {hw.name} ({per} devices per node: some groups of ranks straddle a node "
                "boundary): simulate the program of every rank (dtp, or dtp_replica with "
                "fold_tp=False)")

    def shift(self, d: int, r: int, t: int = 0) -> int:
        """Rank ``t`` of replica ``r``'s copy of the written device ``d``."""
        return d + r * self.stride + t

    def expand(self, sim: Simulation) -> Simulation:
        """The written copy's simulation made the simulation of every copy."""
        own = sim.devices
        n, k = self.replicas, self.peers
        if own and n > 1 and max(own) >= self.stride:
            raise SimulationError(
                f"@{self.fn.name} places values on device {max(own)}, outside replica 0's "
                f"devices 0-{self.stride - 1}: it is not one replica's program")
        if k > 1 and any(d % k for d in own):
            d = next(d for d in own if d % k)
            raise SimulationError(
                f"@{self.fn.name} places values on device {d}, not the first of a group of "
                f"{k} tensor-parallel ranks: it is not rank 0's program")
        stride = self.stride

        def per(x: dict[int, Any]) -> dict[int, Any]:
            return {d + r * stride + t: v for r in range(n) for d, v in x.items()
                    for t in range(k)}

        return replace(
            sim, devices=tuple(sorted(d + r * stride + t for r in range(n) for d in own
                                      for t in range(k))),
            busy_s=per(sim.busy_s), compute_s=per(sim.compute_s), comm_s=per(sim.comm_s),
            idle_s=per(sim.idle_s), peak_memory_bytes=per(sim.peak_memory_bytes),
            host_s=per(sim.host_s),
            num_ops=_every_copy(sim.num_ops, _count(self.fn, True, {}), n, k),
            replicas=(n, stride), peers=k)


def replica_program(fn: Function) -> ReplicaProgram | None:
    """``fn`` as the replica program its ``Replica*`` and ``Peer*`` ops describe
    (each ``Replica*`` op lists the devices of every replica's copy: ``d, d + stride,
    ..., d + (replicas - 1)·stride``, with ``d`` its input's device; each ``Peer*`` op names
    its group's size, ``peers``), or ``None`` when it has neither: a replica program read
    from a file simulates as the program of every copy. Groups that disagree are a
    one-line ``SimulationError``."""
    found: tuple[int, int] | None = None
    peers: int | None = None
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
            elif op.op_type in PEER_OPS:
                k: Any = op.attrs.get("peers")
                if not isinstance(k, int) or k < 1 or (peers is not None and k != peers):
                    want = "" if peers is None else f"; others are over {peers} ranks"
                    raise SimulationError(
                        f"{op.op_type}(peers={k}) in @{f.name} does not name the size of "
                        f"the tensor-parallel group{want}: give every Peer op one positive "
                        "peers (dtp_replica does)")
                peers = k
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
                        f"{op.op_type}(devices={g}) in @{f.name} does not list one "
                        f"device per replica, replicas equally far apart from replica 0's"
                        f"{want}: write each as d, d + stride, ... (dtp_replica does)")
                found = (len(g), stride)
    if found is None and peers is None:
        return None
    n, stride = found if found is not None else (1, 0)
    k = peers or 1
    if n > 1 and stride % k:
        raise SimulationError(
            f"@{fn.name}'s replicas are {stride} devices apart, not a whole number of "
            f"groups of {k} tensor-parallel ranks (its Peer ops' peers): write replicas "
            "of whole groups (dtp_replica does)")
    return ReplicaProgram(fn, n, stride, k)


def replicas_run_alike(hw: Hardware, replicas: int, stride: int) -> bool:
    """Whether ``replicas`` replicas of ``stride`` devices each (replica ``r`` on devices
    ``r·stride ...``) take the same times on ``hw``: one node holds them all, or each
    node whole replicas, or each replica whole nodes."""
    per = hw.devices_per_node
    return (replicas <= 1 or replicas * stride <= per or stride % per == 0
            or per % stride == 0)


def peers_run_alike(hw: Hardware, peers: int) -> bool:
    """Whether groups of ``peers`` tensor-parallel ranks on adjacent devices (a group's
    first device a multiple of ``peers``) take the same times on ``hw``, rank by rank:
    each node holds whole groups, or each group whole nodes."""
    per = hw.devices_per_node
    return peers <= 1 or per % peers == 0 or peers % per == 0


def _every_copy(n_ops: int, shared: tuple[int, int], replicas: int, peers: int) -> int:
    """The ops of the program of every copy, of ``n_ops`` written ones of which
    ``shared`` are (``Replica*``, ``Peer*``) ops: the first written once per
    rank, the second once per replica, the others once per copy."""
    rep, peer = shared
    return replicas * peers * (n_ops - rep - peer) + peers * rep + replicas * peer


def _count(fn: Function, inline: bool, memo: dict[int, tuple[int, int]]) -> tuple[int, int]:
    """``Replica*`` and ``Peer*`` ops of ``fn`` (with ``inline``, of its callees
    per call)."""
    n = memo.get(id(fn))
    if n is None:
        rep = peer = 0
        for op in fn.ops:
            if op.callee is not None:
                if inline:
                    a, b = _count(op.callee, inline, memo)
                    rep += a
                    peer += b
            elif op.op_type in REPLICA_OPS:
                rep += 1
            elif op.op_type in PEER_OPS:
                peer += 1
        n = memo[id(fn)] = (rep, peer)
    return n


def expand_replica_events(events: list[tuple], replicas: int, stride: int,
                          peers: int = 1) -> list[tuple]:
    """The written copy's expanded events (``expand_events``) as every copy's: each event
    on each copy's devices (rank ``t`` of replica ``r``: shifted by ``r·stride + t``); a
    ``Replica*`` op once per rank, on every replica's devices (as the ``MPIAllreduce`` or
    ``MPIAllgather`` of the program of every replica); a ``Peer*`` op once per replica, on
    every rank's devices (as its ``MPIAllreduce`` or ``MPIAllgather``). Sorted by start
    time (stable)."""
    from distir.analysis.renaming import rename_detail

    out: list[tuple] = []
    for ev in events:
        start, dur, devs, op, detail, fname = ev
        if op.op_type in REPLICA_OPS:
            group = tuple(op.attrs["devices"])  # type: ignore[arg-type]
            for t in range(peers):
                out.append((start, dur, tuple(d + t for d in group), op,
                            rename_detail(detail, {d: d + t for d in devs}) if t else detail,
                            fname))
            continue
        if op.op_type in PEER_OPS:
            for r in range(replicas):
                m = {d: d + r * stride for d in devs}
                out.append((start, dur, tuple(m[d] + t for d in devs for t in range(peers)),
                            op, rename_detail(detail, m) if r else detail, fname))
            continue
        for r in range(replicas):
            for t in range(peers):
                if r == 0 and t == 0:
                    out.append(ev)
                    continue
                m = {d: d + r * stride + t for d in devs}
                out.append((start, dur, tuple(m.values()), op, rename_detail(detail, m),
                            fname))
    out.sort(key=lambda e: e[0])
    return out
