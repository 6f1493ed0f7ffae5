"""Values on pipeline stages: the local pieces of each value on each stage's devices, and
the ops that place them as their readers read them (``lower_pipeline``'s half that moves
data; ``pipeline._Pipe`` writes the ops of the program itself).

Pieces are kept per *virtual* rank of the stage mesh whose data axis counts ``dp·K``
coordinates (``d·K + m``: microbatch ``m`` of replica ``d``, see ``pipeline``). A change of
placement is a ``redistribute.plan``; its steps run over the ranks asked for (one
microbatch's, or all), except on the data axis with microbatches, where a sum or a gather
needs every microbatch's piece (``_data_step``). A value read on another stage crosses by
``Send``, one per device, to the device of the same coordinates (``_arrive``).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import numpy as np

from distir.errors import TransformError
from distir.ir.builder import FunctionBuilder
from distir.ir.core import Op, Value
from distir.transforms.program import Program
from distir.transforms.spmd.assignment import LayoutAssignment
from distir.transforms.spmd.mesh import (
    Mesh,
    Partial,
    R,
    Replicate,
    Shard,
    Spec,
    check_spec,
    replicated,
    spec_str,
)
from distir.transforms.spmd.redistribute import Step, plan
from distir.transforms.spmd.stages import StagePartition

__all__ = ["StageValues", "Pieces", "Unfoldable", "NoReplicaForm", "name_hint"]

Pieces = dict[Spec, list[Value | None]]


class StageValues:
    """The pieces of values on stages, and the ops that move and re-place them."""

    prog: Program
    st: StagePartition
    b: FunctionBuilder
    assign: list[LayoutAssignment]
    """Each stage's placements on the virtual mesh."""
    meshes: list[Mesh]
    vmesh: Mesh
    k: int
    mb: list[int]
    """The microbatch of each virtual rank."""
    prank: list[int]
    """The rank in its stage's mesh of each virtual rank's device."""
    ranks_of: list[list[int]]
    all: list[int]
    """The virtual ranks written: every one, or replica 0's (the first ``K·inner``)."""
    written: int
    """The replicas written (``dp``, or 1: replica 0's program, see ``_replica_part``)."""
    fold: bool
    """Whether tensor-parallel rank 0 alone is written (``all`` then holds the virtual
    ranks at tensor coordinate 0; see ``_peer``)."""
    inner: int
    """The devices of one replica of a stage (the mesh ranks ``d·inner ...`` of replica
    ``d``)."""
    stage: dict[int, int]
    home: dict[Value, int]
    readers: dict[Value, list[tuple[int, int]]]
    pieces: dict[tuple[Value, int], Pieces]
    base: dict[tuple[Value, int], Spec]
    """The spec a value's pieces on a stage were made or received in."""
    consts: dict[tuple, Value]
    memo: dict[tuple, Any]
    """Ops already written, by their inputs' identities: a copy shared by a device's
    microbatches is written once."""
    running: dict[tuple[Value, int], dict[Any, Any]]
    """Running sums over microbatches per device (``_accumulate``)."""
    collapsed: set[Value]
    """Values partial on the data axis whose pieces are each device's sum over its
    microbatches, the same piece at each of its microbatches' ranks (the results of the
    ops run once on such sums, ``_Pipe.summed``, and ``_summed``'s values): a sum over
    the data axis adds one piece per device, not ``K``."""
    vgroups: dict[int, tuple[tuple[int, ...], ...]]
    """``_groups``' memo."""
    sums: dict[Value, Value]
    """``_summed``'s value of each value summed over the microbatches."""
    unsummed: dict[Value, Value]
    """The value of which each of ``sums``' values is the sum."""

    # -- devices and names -----------------------------------------------------------------
    def each(self, f: Any) -> list[Value | None]:
        """``f(r)`` at each written virtual rank ``r`` (``None`` at the others), indexed
        by rank."""
        out: list[Value | None] = [None] * (self.all[-1] + 1)
        for r in self.all:
            out[r] = f(r)
        return out

    def pranks(self) -> range:
        """The stage-mesh ranks written (replica 0's first ``inner``, or of those the
        first alone when folded; every replica's)."""
        return range(0, self.written * self.inner, self.inner if self.fold else 1)

    def dev(self, s: int, r: int) -> int:
        return self.meshes[s].devices[self.prank[r]]

    def name(self, v: Value | str, s: int, r: int, per_mb: bool = True) -> str:
        base = v if isinstance(v, str) else (v.name if v.name and v.name != "_" else "v")
        if not isinstance(v, str) and v.name == "_":
            return "_"
        mb = f"_mb{self.mb[r]}" if self.k > 1 and per_mb else ""
        return f"{base}{mb}_d{self.dev(s, r)}"

    def const(self, arr: np.ndarray, device: int, hint: str,
              apart: Hashable = None) -> Value:
        """The constant ``arr`` on ``device``, one per value and key ``apart``
        (``vocab.Const``)."""
        key = (device, arr.dtype.str, arr.shape, arr.tobytes(), apart)
        c = self.consts.get(key)
        if c is None:
            c = self.consts[key] = self.b.op("Constant", value=arr, device=device,
                                             name=f"{hint}_d{device}")
        return c

    def _groups(self, axis: int) -> tuple[tuple[int, ...], ...]:
        """``vmesh.groups(axis)``, made once per axis."""
        got = self.vgroups.get(axis)
        if got is None:
            got = self.vgroups[axis] = self.vmesh.groups(axis)
        return got

    def on_devices(self, s: int, arr: np.ndarray, hint: str) -> list[Value | None]:
        """The constant ``arr`` at each written virtual rank of stage ``s`` (``each``):
        one per device (``const``), made in rank order."""
        per: dict[int, Value] = {}

        def at(r: int) -> Value:
            d = self.dev(s, r)
            c = per.get(d)
            if c is None:
                c = per[d] = self.const(arr, d, hint)
            return c

        return self.each(at)

    def spec(self, v: Value, s: int) -> Spec:
        """The spec ``v`` is produced with (a parameter: as placed on stage ``s``)."""
        v = self.unsummed.get(v, v)
        if v in self.prog.param_set:
            return self.assign[s].spec(v)
        return self.assign[self.home[v]].spec(v)

    def _tau(self, v: Value, s: int, dst: Spec) -> Spec:
        """The spec ``v`` is sent to stage ``s`` in (``_moved`` of what every reader
        there reads), fixed on first use."""
        key = (v, s)
        tau = self.base.get(key)
        if tau is None:
            src = self.spec(v, self.home[v])
            dsts = [dst]
            for i, k in self.readers.get(v, ()):
                reads = self.assign[self.stage[i]].reads[i] if self.stage[i] == s else None
                if reads and reads[k] is not None:
                    dsts.append(reads[k])  # type: ignore[arg-type]
            tau = _moved(src, dsts)
            if check_spec(self.prog.shape(self.unsummed.get(v, v)), tau,
                          self.vmesh) is not None:
                tau = src
            self.base[key] = tau
        return tau

    def _accumulate(self, v: Value, s: int, m: int) -> None:
        """A value partial over the data axis (a weight gradient) that a reader after the
        microbatches reads summed: add microbatch ``m``'s piece to each device's running
        sum now, so the sums are complete when the last microbatch's piece is made."""
        key = (v, s)
        base = self.base[key]
        if not isinstance(base[0], Partial):
            return
        run = self.running.setdefault(key, {})
        if run.get("m", -1) >= m:
            return
        run["m"] = m
        lst = self.pieces[key][base]
        for r in self.ranks_of[m]:
            x = lst[r]
            j = self.prank[r]
            run[j] = x if m == 0 else self.b.op("Add", run[j], x,
                                                name=f"{name_hint(v)}_d{self.dev(s, r)}")

    def _summed(self, v: Value) -> Value:
        """A value standing for each device's sum of its microbatches' pieces of ``v``
        (partial on the data axis, made once per microbatch): the running sums when they
        are complete (``_accumulate``), else the pieces added now; ``collapsed``, on
        ``v``'s stage in its spec. An op run once after the microbatches that reads ``v``
        partial on the data axis and keeps it so (linear in it, by its layout rule) reads
        this instead, once per device, so that no device holds its ``K`` pieces, its
        ``K`` results or their ``K`` sends (as ``dtp``'s running sums)."""
        got = self.sums.get(v)
        if got is not None:
            return got
        s = self.home[v]
        key = (v, s)
        base = self.base[key]
        run = self.running.get(key)
        if run is None or run["m"] != self.k - 1:  # no running sum: add the pieces now
            lst = self.pieces[key][base]
            run = {}
            for r in self.all:
                j = self.prank[r]
                x = lst[r]
                run[j] = x if j not in run else self.b.op(
                    "Add", run[j], x, name=f"{name_hint(v)}_d{self.dev(s, r)}")
        got = self.sums[v] = Value(v.name, v.type)
        self.unsummed[got] = v
        self.home[got] = s
        self.collapsed.add(got)
        self.pieces[(got, s)] = {base: self.each(lambda r: run[self.prank[r]])}
        self.base[(got, s)] = base
        return got

    # -- values on stages ------------------------------------------------------------------
    def get(self, v: Value, s: int, dst: Spec, rs: list[int]) -> list[Value | None]:
        """The pieces of ``v`` on stage ``s``'s devices placed as ``dst``, for the virtual
        ranks ``rs`` (other entries may be ``None``)."""
        key = (v, s)
        made = self.pieces.get(key)
        if made is not None:  # already placed so (then its base has ``rs`` too)
            lst = made.get(dst)
            if lst is not None and _has(lst, rs):
                return lst
        if made is None or not _has(made.get(self.base[key]), rs):
            self._arrive(v, s, dst, rs)
        cache = self.pieces[key]
        if _has(cache.get(dst), rs):
            return cache[dst]
        cur_spec = self.base[key]
        for step in plan(cur_spec, dst):
            nxt = cache.setdefault(step.after, [None] * self.vmesh.size)
            if not _has(nxt, rs):
                self._step(v, s, step, cache[step.before], nxt, rs)
        return cache[dst]

    def _arrive(self, v: Value, s: int, dst: Spec, rs: list[int]) -> None:
        """Make ``v`` available on stage ``s`` for ``rs``: constants on its devices, else a
        ``Send`` of each piece from the producing stage (split first where ``dst`` splits
        what the producer holds whole)."""
        prog, vm = self.prog, self.vmesh
        key = (v, s)
        i = prog.producer.get(self.unsummed.get(v, v))
        if i is not None and not self.assign[self.home[v]].reads[i]:  # known before running
            arr = prog.constant(v)
            if arr is None:
                raise TransformError(f"`{prog.op_text(prog.ops[i])}`: its result is not known "
                                     "before running")
            lst = self.on_devices(s, np.asarray(arr), name_hint(v))
            self.pieces[key] = {replicated(vm): lst}
            self.base[key] = replicated(vm)
            return
        if i is None:
            raise TransformError(f"parameter %{v.name} is not placed on stage {s}")
        s0 = self.home[v]
        if s0 == s:
            raise TransformError(f"{self.what(v)} is read before it is made (stage {s})")
        tau = self._tau(v, s, dst)
        got = self.get(v, s0, tau, rs)
        lst = self.pieces.setdefault(key, {}).setdefault(tau, [None] * vm.size)
        devices, prank, memo, emit = self.meshes[s].devices, self.prank, self.memo, \
            self.b.ops.append
        for r in rs:
            if lst[r] is None:
                x = got[r]
                d = devices[prank[r]]  # ``dev(s, r)``
                mk = ("send", id(x), d)
                y = memo.get(mk)
                if y is None:  # ``b.op("Send", x, device=d, name=...)``, without its lookups
                    y = memo[mk] = Value(self.name(v, s, r))
                    emit(Op("Send", (x,), {"device": d}, (y,)))
                lst[r] = y

    def _step(self, v: Value, s: int, step: object, cur: list[Value | None],
              nxt: list[Value | None], rs: list[int]) -> None:
        assert isinstance(step, Step)
        vm, b, k = self.vmesh, self.b, self.k
        base = name_hint(v)
        if step.kind == "split":
            n = vm.shape[step.axis]
            for r in rs:
                if nxt[r] is not None:
                    continue
                x = cur[r]
                c = vm.coords[r][step.axis]
                mk: tuple = ("split", id(x), step.axis, step.dim, step.groups)
                parts = self.memo.get(mk)
                if parts is None:
                    parts = b.op("Split", x, axis=step.dim, num_outputs=n * step.groups,
                                 name=[f"{base}_d{self.dev(s, r)}"] * (n * step.groups))
                    self.memo[mk] = parts  # type: ignore[assignment]
                keep = [parts[g * n + c] for g in range(step.groups)]  # type: ignore[index]
                nxt[r] = keep[0] if step.groups == 1 else b.op(
                    "Concat", *keep, axis=step.dim, name=self.name(v, s, r))
            return
        op_type = {"allgather": "MPIAllgather", "allreduce": "MPIAllreduce",
                   "reduce_scatter": "MPIReduceScatter"}[step.kind]
        extra = {} if step.kind == "allreduce" else {"axis": step.dim}
        if step.axis == 0 and k > 1:
            self._data_step(v, s, step, op_type, extra, cur, nxt, rs)
            return
        if step.axis == 0 and self.written < vm.shape[0]:  # replica 0's part of each
            for r in rs:
                if nxt[r] is None:
                    nxt[r] = self._replica_part(v, s, step, cur[r], r)
            return
        if self.fold:  # tensor-parallel rank 0's part of each
            for r in rs:
                if nxt[r] is None:
                    nxt[r] = self._peer(v, s, step, cur[r], r)
            return
        want = set(rs)
        for g in self._groups(step.axis):
            if not want.issuperset(g) or all(nxt[r] is not None for r in g):
                continue
            xs = [cur[r] for r in g]
            ck: tuple = ("coll", op_type, step.dim, tuple(id(x) for x in xs))
            outs = self.memo.get(ck)
            if outs is None:
                if len(g) == 1:
                    outs = tuple(xs)
                else:
                    res = b.op(op_type, *xs, num_results=len(g),
                               name=[self.name(v, s, r) for r in g], **extra)
                    if step.groups != 1:
                        res = self._regroup(v, s, g, list(res), step.dim, step.groups)
                    outs = tuple(res)
                self.memo[ck] = outs
            for r, y in zip(g, outs, strict=True):
                nxt[r] = y

    def _data_step(self, v: Value, s: int, step: object, op_type: str, extra: dict,
                   cur: list[Value | None], nxt: list[Value | None], rs: list[int]) -> None:
        """A change on the data axis with ``K > 1`` microbatches: needs every microbatch's
        piece; the ``K`` pieces of a device are added (or joined, ``_join``) first, then the
        collective runs over the ``dp`` replicas (a gather in groups put back in group-major
        order)."""
        assert isinstance(step, Step)
        vm, b, k = self.vmesh, self.b, self.k
        if set(rs) != set(self.all) or any(cur[r] is None for r in self.all):
            raise TransformError(
                f"{self.what(v)} is read placed {spec_str(step.after)} but made "
                f"{spec_str(step.before)}: that needs every microbatch inside the pipeline "
                f"(stage {s}), which {k} microbatches cannot do; use one microbatch")
        dp = vm.shape[0] // k
        once = v in self.collapsed and isinstance(step.before[0], Partial)  # a piece per
        for g in self._groups(0)[:self.inner:self.inner if self.fold else 1]:  # virtual
            # coordinate d*K + m on the data axis, at each written inner coordinate
            per: list[Value] = []
            for d in range(self.written):  # device: its microbatches' sum
                own = [cur[r] for r in g[d * k:(d + 1) * k:k if once else 1]]
                name = f"{name_hint(v)}_d{self.dev(s, g[d * k])}"
                run = self.running.get((v, s))
                if step.kind == "allgather":
                    per.append(self._join(own, step.dim, step.groups, name))
                elif run is not None and run["m"] == k - 1 and step.before == self.base[
                        (v, s)]:
                    per.append(run[self.prank[g[d * k]]])
                else:
                    acc = own[0]
                    for x in own[1:]:
                        acc = b.op("Add", acc, x, name=name)
                    per.append(acc)  # type: ignore[arg-type]
            if self.written < dp:
                per = [self._replica_part(v, s, step, per[0], g[0])]
            elif dp > 1:
                res = b.op(op_type, *per, num_results=dp,
                           name=[f"{name_hint(v)}_d{self.dev(s, g[d * k])}" for d in range(dp)],
                           **extra)
                per = list(res)
                if step.groups != 1:  # device-major blocks -> group-major order
                    per = self._regroup(v, s, g[::k], per, step.dim, step.groups)
            for d in range(self.written):
                mine = g[d * k:(d + 1) * k]
                if step.kind == "reduce_scatter":
                    parts = b.op("Split", per[d], axis=step.dim, num_outputs=k,
                                 name=[self.name(v, s, r) for r in mine])
                    for r, y in zip(mine, parts, strict=True):
                        nxt[r] = y
                else:
                    for r in mine:
                        nxt[r] = per[d]

    def _join(self, own: list[Value | None], dim: int, groups: int, name: str) -> Value:
        """One device's microbatch pieces of a shard along ``dim`` (the virtual data
        coordinates ``d·K ... d·K + K - 1``, in order) joined into the device's shard: one
        ``Concat``, or with ``groups`` interleaved groups each piece's block of each group,
        group-major (``Shard(dim, groups)`` over the ``dp`` replicas)."""
        b = self.b
        if groups == 1:
            return b.op("Concat", *own, axis=dim, name=name)
        parts = [b.op("Split", x, axis=dim, num_outputs=groups, name=[name] * groups)
                 for x in own]
        return b.op("Concat", *(p[j] for j in range(groups) for p in parts), axis=dim,
                    name=name)

    def what(self, v: Value) -> str:
        """``v`` for an error message: its printed name and the op that makes it, as
        ``Program.op_text`` writes them (an unnamed value, a gradient's, numbered as in
        the printed function)."""
        u = self.unsummed.get(v, v)
        i = self.prog.producer.get(u)
        name = self.prog.value_text(u)
        return name if i is None else f"{name} (`{self.prog.op_text(self.prog.ops[i])}`)"

    def _replica_part(self, v: Value, s: int, step: Step, x: Value | None, r: int) -> Value:
        """Replica 0's part of the collective ``step`` over the replicas of ``x`` (virtual
        rank ``r``'s piece of ``v`` on stage ``s``): ``ReplicaAllreduce`` or
        ``ReplicaAllgather`` over the device of ``r`` and its copies on the other replicas
        (a grouped gather put back in group-major order). A reduce-scatter over the
        replicas has no replica form: ``NoReplicaForm`` (the caller writes every
        replica)."""
        if step.kind == "reduce_scatter":
            raise NoReplicaForm(
                f"{self.what(v)} is read placed {spec_str(step.after)} but made "
                f"{spec_str(step.before)}: a reduce-scatter over the replicas, which replica "
                "0's program cannot write (only all-reduces and all-gathers); write every "
                "replica's")
        mk: tuple = (("replica", id(x)) if step.kind == "allreduce" else
                     ("replica", step.kind, step.dim, step.groups, id(x)))
        y = self.memo.get(mk)
        if y is None:
            devs = self.meshes[s].devices
            j = self.prank[r]
            n = self.vmesh.shape[0] // self.k
            group = [devs[j + d * self.inner] for d in range(n)]
            name = self.name(v, s, r, per_mb=False)
            if step.kind == "allreduce":
                y = self.b.op("ReplicaAllreduce", x, devices=group, name=name)
            else:
                y = self.b.op("ReplicaAllgather", x, devices=group, axis=step.dim, name=name)
                if step.groups != 1:
                    y = self._regroup(v, s, (r,), [y], step.dim, step.groups, n)[0]
            self.memo[mk] = y
        return y

    def _peer(self, v: Value, s: int, step: Step, x: Value | None, r: int) -> Value:
        """Rank 0's part of the collective ``step`` over the tensor axis of ``x`` (virtual
        rank ``r``'s piece of ``v`` on stage ``s``): ``PeerAllreduce`` or
        ``PeerAllgather`` over its device and the next ``tp - 1`` (the ranks' copies), a
        grouped gather put back in group-major order. A reduce-scatter has no such form:
        ``Unfoldable`` (the caller writes every rank)."""
        tp = self.vmesh.shape[step.axis]
        if step.kind == "reduce_scatter":
            raise Unfoldable(f"{self.what(v)}: a reduce-scatter over the tensor axis")
        mk = ("peer", step.kind, step.dim, step.groups, id(x))
        y = self.memo.get(mk)
        if y is None:
            name = self.name(v, s, r)
            if step.kind == "allreduce":
                y = self.b.op("PeerAllreduce", x, peers=tp, name=name)
            else:
                y = self.b.op("PeerAllgather", x, axis=step.dim, peers=tp, name=name)
                if step.groups != 1:
                    y = self._regroup(v, s, (r,), [y], step.dim, step.groups, tp)[0]
            self.memo[mk] = y
        return y

    def _regroup(self, v: Value, s: int, g: tuple[int, ...], cur: list[Value], dim: int,
                 groups: int, n: int = 0) -> list[Value]:
        """Device-major blocks of a gathered grouped shard back in group-major order
        (``n``: the devices gathered over, by default ``len(g)``)."""
        n, b = n or len(g), self.b
        out = []
        for r, x in zip(g, cur, strict=True):
            parts = b.op("Split", x, axis=dim, num_outputs=n * groups,
                         name=[self.name(v, s, r)] * (n * groups))
            order = [parts[c * groups + j] for j in range(groups) for c in range(n)]
            out.append(b.op("Concat", *order, axis=dim, name=self.name(v, s, r)))
        return out


class Unfoldable(TransformError):
    """A collective over the tensor axis that rank 0's program cannot write alone."""


class NoReplicaForm(TransformError):
    """A collective over the replicas that replica 0's program cannot write alone."""


def _has(lst: list[Value | None] | None, rs: list[int]) -> bool:
    return lst is not None and None not in map(lst.__getitem__, rs)


def name_hint(v: Value) -> str:
    """A base for the names of ``v``'s local pieces."""
    return v.name if v.name and v.name != "_" else "v"


def _moved(src: Spec, dsts: list[Spec]) -> Spec:
    """The spec a value crosses stages in, for readers that read it as ``dsts``: the
    producer's, but summed first on an axis no reader reads partial (as ``dtp``
    all-reduces an input gradient before sending it; with microbatches, one send of the
    sum, not one per microbatch), and split before it is sent on an axis every reader
    splits alike where the producer holds it whole (fewer bytes on the wire)."""
    out: list = [R if isinstance(x, Partial) and not any(isinstance(d[a], Partial)
                                                         for d in dsts) else x
                 for a, x in enumerate(src)]
    taken = {p.dim for p in out if isinstance(p, Shard)}
    for a, x in enumerate(out):
        y = dsts[0][a]
        if isinstance(x, Replicate) and isinstance(y, Shard) and y.dim not in taken and all(
                d[a] == y for d in dsts):
            out[a] = y
            taken.add(y.dim)
    return tuple(out)
