"""Pipeline passes on layout assignments: the schedule, and the lowering with stages and
microbatches.

- ``schedule(stages, microbatches, kind)`` -> ``Schedule``: the units ``(phase, stage,
  microbatch)`` of every stage in GPipe or 1F1B order, merged into ticks
  (``distir.transforms.schedule.ticks``); ``dumps``, ``check``.
- ``lower_pipeline(assignment, stages, sched, self_contained=False)`` -> a verified SPMD
  ``Function``: every op of stage ``s`` runs on that stage's sub-mesh, values crossing
  stages are moved with ``Send`` (redistributed first or after where the layouts differ),
  in the schedule's order.

**Devices.** The assignment's mesh shape ``(dp, ...)`` is each stage's sub-mesh; stage
``s`` has the devices ``(d * pp + s) * inner + j`` for data coordinate ``d`` and inner
(row-major) coordinate ``j``, as ``dtp`` numbers them (``inner = tp`` on a ``(dp, tp)``
mesh). A list of assignments, one per stage, gives each stage its own placements on its
own mesh (equal shapes, disjoint devices).

**Microbatches are virtual replicas.** With ``K`` microbatches the assignment runs on the
*virtual* mesh whose axis 0 (the data axis) has ``dp·K`` coordinates: virtual coordinate
``d·K + m`` is microbatch ``m`` of replica ``d``, on replica ``d``'s device, so the rows of
the batch go where ``dtp`` puts them (each replica's slice cut in ``K``), local shapes and
mean scales (``1/(dp·K)``) follow from the placements, and the program equals the
sequential one by the SPMD semantics alone. The schedule only orders the work: a forward
or backward op of stage ``s`` runs for microbatch ``m`` in unit ``(F|B, s, m)``; the ops
that do not depend on the batch run once before the units (a copy per device, shared by
its microbatches), the optimizer updates once after them. A change of placement on the
data axis needs every microbatch: a sum (gradients, ``P -> R``) adds the ``K`` pieces on
each device, then all-reduces over the ``dp`` replicas, right after the last microbatch
made them (so it overlaps the remaining backward work); a gather concatenates the ``K``
pieces and all-gathers. An op that needs such a change inside the pipeline (a value
gathered over the batch by a forward or backward op) is refused for ``K > 1``.

The placed variant takes each device's parameters (``{name}_d{device}``, a batch input
as its replica's slice, cut into the ``K`` microbatches by a ``Split``) and returns every
device's piece of every result (a replica's slice of a batch result, concatenated over its
microbatches); ``self_contained=True`` takes the sequential parameters, broadcasts them to
the stages that read them and returns the sequential results on the sequential device.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from distir.errors import TransformError
from distir.ir.builder import FunctionBuilder
from distir.ir.core import Function, Op, Value
from distir.ir.types import TensorType
from distir.ir.verify import verify
from distir.transforms.schedule import SCHEDULES, Unit, stage_order, ticks
from distir.transforms.spmd.assignment import LayoutAssignment, is_shape_operand
from distir.transforms.spmd.lower import bias_once, local_attrs, split_sizes
from distir.transforms.spmd.mesh import (
    Mesh,
    Partial,
    R,
    Replicate,
    Shard,
    Spec,
    check_spec,
    local_shape,
    replicated,
    spec_str,
)
from distir.transforms.spmd.redistribute import Step, plan
from distir.transforms.spmd.stages import StagePartition

__all__ = ["Schedule", "schedule", "lower_pipeline", "stage_meshes"]


@dataclass(frozen=True, eq=False)
class Schedule:
    """``ticks``: the units of all stages in program order, grouped in ticks (every unit of
    a tick depends only on units of earlier ticks)."""

    kind: str
    pp: int
    microbatches: int
    training: bool
    ticks: tuple[tuple[Unit, ...], ...]

    def check(self) -> None:
        """Raise ``TransformError`` unless every stage runs its units in the order of
        ``kind`` and each unit comes after the units it depends on."""
        done: set[Unit] = set()
        seen: list[list[Unit]] = [[] for _ in range(self.pp)]
        for tick in self.ticks:
            for u in tick:
                kind, s, m = u
                need = [("F", s - 1, m)] if kind == "F" and s else []
                if kind == "B":
                    need = [("F", s, m)] + ([("B", s + 1, m)] if s + 1 < self.pp else [])
                for x in need:
                    if x not in done:
                        raise TransformError(f"unit {_u(u)} runs before {_u(x)}")
                seen[s].append(u)
            done.update(tick)
        for s in range(self.pp):
            want = stage_order(self.kind, s, self.pp, self.microbatches, self.training)
            if seen[s] != want:
                raise TransformError(f"stage {s} runs {' '.join(map(_u, seen[s]))}, "
                                     f"not the {self.kind} order")

    def dumps(self) -> str:
        """One line per tick: ``tick 3: F1.2 B0.0`` (phase, stage, microbatch)."""
        head = (f"// {self.kind}, {self.pp} stages, {self.microbatches} microbatches"
                f"{', training' if self.training else ''}")
        return "\n".join([head] + [f"tick {n}: " + " ".join(map(_u, t))
                                   for n, t in enumerate(self.ticks)]) + "\n"


def _u(u: Unit) -> str:
    return f"{u[0]}{u[1]}.{u[2]}"


def schedule(stages: StagePartition, microbatches: int = 1, kind: str = "gpipe",
             ) -> Schedule:
    """The units of ``stages`` for ``microbatches`` in the ``"gpipe"`` or ``"1f1b"``
    order; checked."""
    if not isinstance(microbatches, int) or isinstance(microbatches, bool) or microbatches < 1:
        raise TransformError(f"microbatches must be a positive integer, got {microbatches!r}")
    if kind not in SCHEDULES:
        raise TransformError(f"unknown schedule {kind!r}: choose one of {', '.join(SCHEDULES)}")
    training = any(p == "B" for p in stages.phase)
    out = Schedule(kind, stages.pp, microbatches, training,
                   tuple(tuple(t) for t in ticks(kind, stages.pp, microbatches, training)))
    out.check()
    return out


def stage_meshes(shape: tuple[int, ...], pp: int) -> list[Mesh]:
    """The sub-mesh of each of ``pp`` stages, devices numbered as ``dtp`` does: data
    coordinate ``d``, inner coordinate ``j`` of stage ``s`` is ``(d * pp + s) * inner + j``."""
    inner = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    return [Mesh(tuple(shape), tuple((d * pp + s) * inner + j for d in range(shape[0])
                                     for j in range(inner))) for s in range(pp)]


def lower_pipeline(assignment: LayoutAssignment | Sequence[LayoutAssignment],
                   stages: StagePartition, sched: Schedule | None = None, *,
                   self_contained: bool = False) -> Function:
    """The program of ``assignment`` cut in ``stages`` and run in ``sched`` (default: one
    microbatch, GPipe); verified. See the module docstring."""
    sched = sched or schedule(stages)
    if sched.pp != stages.pp:
        raise TransformError(f"the schedule has {sched.pp} stages, the partition {stages.pp}")
    stages.check()
    pipe = _Pipe(assignment, stages, sched)
    fn = pipe.run(self_contained)
    bound = stages.prog.fn.initializers
    if bound:  # an imported model's weights: the same, or each device's piece of them
        fn.initializers = dict(bound) if self_contained else pipe.placed_initializers(bound)
    verify(fn, num_devices=_Pipe.device_count(assignment, stages.pp))
    return fn


Pieces = dict[Spec, list[Value | None]]


class _Pipe:
    @staticmethod
    def device_count(a: LayoutAssignment | Sequence[LayoutAssignment], pp: int) -> int:
        if isinstance(a, LayoutAssignment):
            return a.mesh.size * pp
        return max(d for x in a for d in x.mesh.devices) + 1

    def __init__(self, a: LayoutAssignment | Sequence[LayoutAssignment], st: StagePartition,
                 sched: Schedule) -> None:
        pp, k = st.pp, sched.microbatches
        if isinstance(a, LayoutAssignment):
            self.meshes = stage_meshes(a.mesh.shape, pp)
            per = [a] * pp
        else:
            per = list(a)
            if len(per) != pp:
                raise TransformError(f"{len(per)} assignments for {pp} stages: give one per "
                                     "stage")
            self.meshes = [x.mesh for x in per]
            if len({m.shape for m in self.meshes}) != 1:
                raise TransformError("the stages' meshes differ in shape: "
                                     + ", ".join(str(m) for m in self.meshes))
            if len({d for m in self.meshes for d in m.devices}) != pp * self.meshes[0].size:
                raise TransformError("two stages' meshes share a device")
        self.prog = prog = st.prog
        if any(x.prog is not prog for x in per):
            raise TransformError("the assignment and the stage partition are of different "
                                 "programs: build both from one Program")
        shape = self.meshes[0].shape
        self.vmesh = Mesh((shape[0] * k,) + shape[1:])
        self.assign: list[LayoutAssignment] = []
        checked: dict[int, LayoutAssignment] = {}
        for x in per:  # the placements on the virtual mesh (microbatches on the data axis)
            wide = checked.get(id(x))
            if wide is None:
                wide = checked[id(x)] = x.on(self.vmesh)
                try:
                    wide.check()
                except TransformError as e:
                    raise TransformError(f"with {k} microbatches: {e.message}") from None
            self.assign.append(wide)
        self.st, self.sched, self.k, self.pp = st, sched, k, pp
        self.b = FunctionBuilder(prog.fn.name)
        vm = self.vmesh
        self.mb = [c[0] % k for c in vm.coords]
        inner = self.meshes[0].size // shape[0]
        self.prank = [(c[0] // k) * inner + (r % inner) for r, c in enumerate(vm.coords)]
        self.ranks_of = [[r for r in range(vm.size) if self.mb[r] == m] for m in range(k)]
        self.all = list(range(vm.size))
        self.pieces: dict[tuple[Value, int], Pieces] = {}
        self.base: dict[tuple[Value, int], Spec] = {}
        self.consts: dict[tuple, Value] = {}
        self.origin: list[tuple[Value, Value, Spec, Mesh, int]] = []
        """Each placed parameter: ``(placed, sequential, spec, stage mesh, mesh rank)``."""
        self.running: dict[tuple[Value, int], dict[Any, Any]] = {}
        """Running sums over microbatches per device (``_accumulate``)."""
        self.memo: dict[tuple, Any] = {}
        """Ops already written, by their inputs' identities: a copy shared by a device's
        microbatches is written once."""
        self.stage: dict[int, int] = {i: s for i, s in enumerate(st.stage) if s is not None}
        self.home: dict[Value, int] = {}
        for i in prog.live_ops:
            for o in prog.ops[i].outputs:
                self.home[o] = self.stage[i]
        self.deferred = self._deferred() if k > 1 else set()
        self.readers: dict[Value, list[tuple[int, int]]] = {}
        """``(op index, input index)`` of every live read (shape operands excluded)."""
        for i in prog.live_ops:
            op = prog.ops[i]
            for kk, v in enumerate(op.inputs):
                if v is not None and not is_shape_operand(op, kk):
                    self.readers.setdefault(v, []).append((i, kk))

    def _deferred(self) -> set[int]:
        """The forward and backward ops that need every microbatch (a read that changes the
        data axis by a collective: an embedding gradient's rows gathered over the batch),
        and every such op reading their results: run once after the microbatches."""
        prog, st = self.prog, self.st
        out: set[int] = set()
        for i in prog.live_ops:
            s = self.stage[i]
            reads = self.assign[s].reads[i]
            if st.phase[i] not in ("F", "B") or not reads:
                continue
            op = prog.ops[i]
            for v, rd in zip(op.inputs, reads, strict=True):
                if v is None or rd is None:
                    continue
                j = prog.producer.get(v)
                if j in out:
                    out.add(i)
                    break
                src = self.assign[s].spec(v) if j is None else \
                    self.assign[self.stage[j]].spec(v)
                if any(x.axis == 0 and x.kind != "split" for x in plan(src, rd)):
                    out.add(i)
                    break
        return out

    def per_mb(self, i: int) -> bool:
        """Whether op ``i`` runs once per microbatch (in the schedule's units)."""
        return self.st.phase[i] in ("F", "B") and i not in self.deferred

    # -- devices and names -----------------------------------------------------------------
    def dev(self, s: int, r: int) -> int:
        return self.meshes[s].devices[self.prank[r]]

    def name(self, v: Value | str, s: int, r: int, per_mb: bool = True) -> str:
        base = v if isinstance(v, str) else (v.name if v.name and v.name != "_" else "v")
        if not isinstance(v, str) and v.name == "_":
            return "_"
        mb = f"_mb{self.mb[r]}" if self.k > 1 and per_mb else ""
        return f"{base}{mb}_d{self.dev(s, r)}"

    def const(self, arr: np.ndarray, device: int, hint: str) -> Value:
        key = (device, arr.dtype.str, arr.shape, arr.tobytes())
        c = self.consts.get(key)
        if c is None:
            c = self.consts[key] = self.b.op("Constant", value=arr, device=device,
                                             name=f"{hint}_d{device}")
        return c

    def spec(self, v: Value, s: int) -> Spec:
        """The spec ``v`` is produced with (a parameter: as placed on stage ``s``)."""
        if v in self.prog.param_set:
            return self.assign[s].spec(v)
        return self.assign[self.home[v]].spec(v)

    # -- the program -------------------------------------------------------------------------
    def run(self, self_contained: bool) -> Function:
        prog, st = self.prog, self.st
        self._params(self_contained)
        for i in prog.live_ops:  # independent of the batch: once, before the microbatches
            if st.phase[i] == "H" and self.assign[st.stage[i]].reads[i]:  # type: ignore[index]
                self._op(i, self.all)
        units = {(ph, s): [i for i in prog.live_ops if st.phase[i] == ph and st.stage[i] == s
                           and self.assign[s].reads[i] and i not in self.deferred]
                 for ph in "FB" for s in range(self.pp)}
        for tick in self.sched.ticks:
            made: list[tuple[int, int]] = []
            for kind, s, m in tick:
                for i in units[(kind, s)]:
                    self._op(i, self.ranks_of[m])
                    for o in prog.ops[i].outputs:
                        self._after(o, m, other_stages=False)
                    made.append((i, m))
            for i, m in made:  # transfers after the tick's units, so stages overlap
                for o in prog.ops[i].outputs:
                    self._after(o, m, other_stages=True)
        for i in prog.live_ops:  # the updates (and deferred ops): once, after the microbatches
            if (st.phase[i] == "U" or i in self.deferred) and \
                    self.assign[st.stage[i]].reads[i]:  # type: ignore[index]
                self._op(i, self.all)
        return self.b.ret(*self._returns(self_contained))

    def _params(self, self_contained: bool) -> None:
        prog, b = self.prog, self.b
        for p in prog.fn.params:
            t = prog.type(p)
            if not isinstance(t, TensorType):
                raise TransformError(f"parameter %{p.name} is not a tensor")
            used = sorted({self.stage[i] for i, _ in self.readers.get(p, ())})
            if not used and p in prog.returned:
                used = [0]
            if self_contained:
                whole = b.param(p.name, t)
                if not used:
                    continue
                devs = [self.meshes[s].devices[j] for s in used
                        for j in range(self.meshes[s].size)]
                copies = b.op("MPIBroadcast", whole, devices=devs, num_results=len(devs),
                              name=[f"{p.name}_d{d}" for d in devs])
                copies = [copies] if len(devs) == 1 else list(copies)
                at = dict(zip(devs, copies, strict=True))
                for s in used:
                    lst: list[Value | None] = [at[self.dev(s, r)] for r in self.all]
                    self.pieces[(p, s)] = {replicated(self.vmesh): lst}
                    self.base[(p, s)] = replicated(self.vmesh)
                continue
            for s in used:
                spec, mesh = self.spec(p, s), self.meshes[s]
                shp = local_shape(t.shape, spec, mesh)
                placed = [b.param(f"{p.name}_d{d}", TensorType(t.dtype, shp, d))
                          for d in mesh.devices]
                self.origin.extend((x, p, spec, mesh, j) for j, x in enumerate(placed))
                lst = [placed[self.prank[r]] for r in self.all]
                if self.k > 1 and isinstance(spec[0], Shard):  # the replica's microbatches
                    if spec[0].groups != 1:
                        raise TransformError(f"parameter %{p.name} is split in groups along "
                                             "the data axis: cannot cut it in microbatches")
                    parts = [b.op("Split", x, axis=spec[0].dim, num_outputs=self.k,
                                  name=[f"{p.name}_mb{m}_d{x.type.device}"  # type: ignore
                                        for m in range(self.k)]) for x in placed]
                    lst = [parts[self.prank[r]][self.mb[r]] for r in self.all]
                self.pieces[(p, s)] = {spec: lst}
                self.base[(p, s)] = spec

    def placed_initializers(self, bound: dict[str, Any]) -> dict[str, np.ndarray]:
        """The value of each placed parameter whose sequential one is bound (``bound``, by
        name): its device's piece, by placed name."""
        out: dict[str, np.ndarray] = {}
        for x, p, spec, mesh, j in self.origin:
            arr = bound.get(p.name or "")
            if arr is None or x.name is None:
                continue
            arr = np.asarray(arr)
            for a, pl in enumerate(spec):
                if isinstance(pl, Shard):
                    arr = _block(arr, pl, mesh.shape[a], mesh.coords[j][a])
            out[x.name] = np.asarray(arr, order="C")
        return out

    def _returns(self, self_contained: bool) -> list[Value]:
        prog, vm = self.prog, self.vmesh
        rets: list[Value] = []
        for v in prog.fn.returns:
            s = self.home.get(v, 0) if v not in prog.param_set else min(
                (x[1] for x in self.pieces if x[0] is v), default=0)
            if self_contained:
                lst = self.get(v, s, replicated(vm), self.all)
                t = prog.type(v)
                dev = t.device if isinstance(t, TensorType) else 0
                r = next((r for r in self.all if self.dev(s, r) == dev), None)
                rets.append(lst[r] if r is not None else  # type: ignore[arg-type]
                            self.b.op("Send", lst[0], device=dev, name=_base(v)))
                continue
            spec = self.spec(v, s)
            summed = tuple(R if isinstance(x, Partial) else x for x in spec)
            lst = self.get(v, s, summed, self.all)
            for j in range(self.meshes[s].size):
                own = [lst[r] for r in self.all if self.prank[r] == j]
                if self.k > 1 and isinstance(summed[0], Shard):
                    rets.append(self.b.op("Concat", *own, axis=summed[0].dim,
                                          name=f"{_base(v)}_d{self.meshes[s].devices[j]}"))
                else:
                    rets.append(own[0])  # type: ignore[arg-type]
        return rets

    # -- ops -------------------------------------------------------------------------------
    def _op(self, i: int, rs: list[int]) -> None:
        prog, b, vm = self.prog, self.b, self.vmesh
        s = self.st.stage[i]
        assert s is not None
        op = prog.ops[i]
        a = self.assign[s]
        reads, out = a.reads[i], a.outcomes[i]
        assert reads and out is not None
        ins: list[list[Value | None]] = []
        for k, (v, sp) in enumerate(zip(op.inputs, reads, strict=True)):
            if v is None:
                ins.append([None] * vm.size)
            elif is_shape_operand(op, k):
                ins.append(self._shape_operand(op, k, out.outs, s))
            else:
                assert sp is not None
                ins.append(self.get(v, s, sp, rs))
        attrs = local_attrs(op, reads, vm)
        per_mb = self.per_mb(i)
        res: list[list[Value | None]] = [[None] * vm.size for _ in op.outputs]
        once = bias_once(op, reads, out.outs)
        for r in rs:
            d = self.dev(s, r)
            args = [x[r] for x in ins]
            if any(vm.coords[r][a] for a in once):  # the bias added once to the sum
                args = args[:2]
            key = (i, d, tuple(id(x) for x in args))
            got = self.memo.get(key)
            if got is None:
                if not op.inputs:
                    attrs["device"] = d
                vals = b.op(op.op_type, *args, num_results=len(op.outputs),
                            name=[self.name(o, s, r, per_mb) for o in op.outputs], **attrs)
                vals = (vals,) if len(op.outputs) == 1 else tuple(vals)
                for k, (o, axes) in enumerate(zip(op.outputs, out.scaled, strict=True)):
                    if axes:
                        n = int(np.prod([vm.shape[ax] for ax in axes]))
                        c = self.const(np.asarray(1.0 / n, dtype=prog.type(o).dtype.np), d,
                                       f"{_base(o)}_scale")
                        vals = vals[:k] + (b.op("Mul", vals[k], c,
                                                name=self.name(o, s, r, per_mb)),
                                           ) + vals[k + 1:]
                got = self.memo[key] = vals  # type: ignore[assignment]
            for k in range(len(op.outputs)):
                res[k][r] = got[k]  # type: ignore[index]
        for k, o in enumerate(op.outputs):
            cache = self.pieces.setdefault((o, s), {})
            self.base[(o, s)] = out.outs[k]
            lst = cache.setdefault(out.outs[k], [None] * vm.size)
            for r in rs:
                lst[r] = res[k][r]
        if not per_mb:
            for o in op.outputs:
                self._after(o, None, other_stages=False)
                self._after(o, None, other_stages=True)

    def _after(self, v: Value, m: int | None, other_stages: bool) -> None:
        """Right after ``v`` is made (for microbatch ``m``, or once), ``other_stages``
        false: the redistributions its readers need on its own stage, and those made before
        it is sent to other stages; after the tick's units, ``other_stages`` true: the
        sends, and the redistributions after them. So communication overlaps later work. A
        reader that runs once after the microbatches is served after the last one."""
        s0 = self.home[v]
        rs = self.ranks_of[m] if m is not None else self.all
        for i, k in self.readers.get(v, ()):
            s = self.st.stage[i]
            assert s is not None
            reads = self.assign[s].reads[i]
            rd = reads[k] if reads else None
            if rd is None or (other_stages and s == s0):
                continue
            want = rs
            if m is not None and not self.per_mb(i):
                if not other_stages and self.k > 1 and not isinstance(rd[0], Partial):
                    self._accumulate(v, s0, m)
                if m != self.k - 1:
                    continue
                want = self.all
            if other_stages:
                self.get(v, s, rd, want)
            elif s != s0:
                self.get(v, s0, self._tau(v, s, rd), want)
            elif rd != self.spec(v, s0):
                self.get(v, s, rd, want)

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
            if check_spec(self.prog.shape(v), tau, self.vmesh) is not None:
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
                                                name=f"{_base(v)}_d{self.dev(s, r)}")

    def _shape_operand(self, op: Op, k: int, outs: tuple, s: int) -> list[Value | None]:
        prog = self.prog
        if op.op_type == "Split":
            arr = split_sizes(prog, op, k, outs, self.vmesh)
        else:
            shp = local_shape(prog.shape(op.outputs[0]), outs[0], self.vmesh)
            arr = np.asarray(shp, dtype=np.int64)
        hint = "sizes" if op.op_type == "Split" else "shape"
        return [self.const(arr, self.dev(s, r), hint) for r in self.all]

    # -- values on stages ------------------------------------------------------------------
    def get(self, v: Value, s: int, dst: Spec, rs: list[int]) -> list[Value | None]:
        """The pieces of ``v`` on stage ``s``'s devices placed as ``dst``, for the virtual
        ranks ``rs`` (other entries may be ``None``)."""
        key = (v, s)
        if key not in self.pieces or not _has(self.pieces[key].get(self.base[key]), rs):
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
        i = prog.producer.get(v)
        if i is not None and not self.assign[self.home[v]].reads[i]:  # known before running
            arr = prog.const(v)
            if arr is None:
                raise TransformError(f"`{prog.op_text(prog.ops[i])}`: its result is not known "
                                     "before running")
            lst: list[Value | None] = [self.const(np.asarray(arr), self.dev(s, r), _base(v))
                                       for r in self.all]
            self.pieces[key] = {replicated(vm): lst}
            self.base[key] = replicated(vm)
            return
        if i is None:
            raise TransformError(f"parameter %{v.name} is not placed on stage {s}")
        s0 = self.home[v]
        if s0 == s:
            raise TransformError(f"%{v.name} is read before it is made (stage {s})")
        tau = self._tau(v, s, dst)
        got = self.get(v, s0, tau, rs)
        lst = self.pieces.setdefault(key, {}).setdefault(tau, [None] * vm.size)
        for r in rs:
            if lst[r] is None:
                x = got[r]
                d = self.dev(s, r)
                mk = ("send", id(x), d)
                y = self.memo.get(mk)
                if y is None:
                    y = self.memo[mk] = self.b.op("Send", x, device=d, name=self.name(v, s, r))
                lst[r] = y

    def _step(self, v: Value, s: int, step: object, cur: list[Value | None],
              nxt: list[Value | None], rs: list[int]) -> None:
        assert isinstance(step, Step)
        vm, b, k = self.vmesh, self.b, self.k
        base = _base(v)
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
        want = set(rs)
        for g in vm.groups(step.axis):
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
        piece; the ``K`` pieces of a device are added (or concatenated) first, then the
        collective runs over the ``dp`` replicas."""
        assert isinstance(step, Step)
        vm, b, k = self.vmesh, self.b, self.k
        if set(rs) != set(self.all) or any(x is None for x in cur):
            raise TransformError(
                f"%{_base(v)} is read placed {spec_str(step.after)} but made "
                f"{spec_str(step.before)}: that needs every microbatch inside the pipeline "
                f"(stage {s}), which {k} microbatches cannot do; use one microbatch")
        if step.groups != 1:
            raise TransformError(f"%{v.name} is split in groups along the data axis: cannot "
                                 "gather it over microbatches")
        dp = vm.shape[0] // k
        for g in vm.groups(0):  # virtual coordinate d*K + m along the data axis
            per: list[Value] = []
            for d in range(dp):
                own = [cur[r] for r in g[d * k:(d + 1) * k]]
                name = f"{_base(v)}_d{self.dev(s, g[d * k])}"
                run = self.running.get((v, s))
                if step.kind == "allgather":
                    per.append(b.op("Concat", *own, axis=step.dim, name=name))
                elif run is not None and run["m"] == k - 1 and step.before == self.base[
                        (v, s)]:
                    per.append(run[self.prank[g[d * k]]])
                else:
                    acc = own[0]
                    for x in own[1:]:
                        acc = b.op("Add", acc, x, name=name)
                    per.append(acc)  # type: ignore[arg-type]
            if dp > 1:
                res = b.op(op_type, *per, num_results=dp,
                           name=[f"{_base(v)}_d{self.dev(s, g[d * k])}" for d in range(dp)],
                           **extra)
                per = list(res)
            for d in range(dp):
                mine = g[d * k:(d + 1) * k]
                if step.kind == "reduce_scatter":
                    parts = b.op("Split", per[d], axis=step.dim, num_outputs=k,
                                 name=[self.name(v, s, r) for r in mine])
                    for r, y in zip(mine, parts, strict=True):
                        nxt[r] = y
                else:
                    for r in mine:
                        nxt[r] = per[d]

    def _regroup(self, v: Value, s: int, g: tuple[int, ...], cur: list[Value], dim: int,
                 groups: int) -> list[Value]:
        """Device-major blocks of a gathered grouped shard back in group-major order."""
        n, b = len(g), self.b
        out = []
        for r, x in zip(g, cur, strict=True):
            parts = b.op("Split", x, axis=dim, num_outputs=n * groups,
                         name=[self.name(v, s, r)] * (n * groups))
            order = [parts[c * groups + j] for j in range(groups) for c in range(n)]
            out.append(b.op("Concat", *order, axis=dim, name=self.name(v, s, r)))
        return out


def _block(arr: np.ndarray, pl: Shard, n: int, c: int) -> np.ndarray:
    """Block ``c`` of ``n`` of ``arr`` along ``pl.dim`` (of every group, joined)."""
    d, g = pl.dim, pl.groups
    shp = arr.shape
    grouped = arr.reshape(shp[:d] + (g, shp[d] // g) + shp[d + 1:])
    part = np.split(grouped, n, axis=d + 1)[c]
    return part.reshape(shp[:d] + (shp[d] // n,) + shp[d + 1:])


def _has(lst: list[Value | None] | None, rs: list[int]) -> bool:
    return lst is not None and all(lst[r] is not None for r in rs)


def _base(v: Value) -> str:
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
