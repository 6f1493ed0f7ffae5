"""Pipeline passes on layout assignments: the schedule, and the lowering with stages and
microbatches.

- ``schedule(stages, microbatches, kind)`` -> ``Schedule`` (``units``): the units
  ``(phase, stage, microbatch)`` of every stage in GPipe or 1F1B order, merged into ticks.
- ``lower_pipeline(assignment, stages, sched, self_contained=False)`` -> a verified SPMD
  ``Function``: every op of stage ``s`` runs on that stage's sub-mesh, values crossing
  stages are moved with ``Send`` (redistributed first or after where the layouts differ),
  in the schedule's order; units of the schedule that are equal (a stage's microbatches
  after the first, as a rule) are calls of one stage function, and equal repeated layers
  inside a unit (or among the updates) calls of one layer function (``outline``; the
  layers are ``Structure``'s anchors). The units of the middle microbatches are copies of
  microbatch 1's where its template holds (``replay``), so they are not written op by op
  (with stage functions, each is a placeholder that ``outline`` makes a call); so are,
  with stage functions, a unit's many repeated layers of one form after two written
  alike (``layer_copy``), in the units ``replay`` does not record.

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
pieces and all-gathers. A microbatch's pieces made in a repeated layer whole on its stage
are added at the end of the layer's run (``_release``), as ``dtp`` adds after its layer
call. An op run once after the microbatches that is linear in a value partial on the data
axis (by its layout rule) runs once per device on the running sums (``_summed_ops``,
``StageValues._summed``), so that no device keeps every microbatch's piece to the end.
A forward or backward op that needs such a change (a value gathered over the batch: HF
GPT-2's attention mask), and every op reading its results, runs once after the units, on
every microbatch's pieces.

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
from distir.ir.builder import FunctionBuilder, normalize_attr
from distir.ir.core import Function, Op, Value
from distir.ir.types import TensorType
from distir.ir.verify import verify
from distir.transforms.spmd.aligned import aligned_axis, index_only, local_indices
from distir.transforms.spmd.assignment import LayoutAssignment, is_shape_operand
from distir.transforms.spmd.layer_copy import LayerCopies
from distir.transforms.spmd.lower import BROADCASTS, bias_once, local_attrs, made_as, split_sizes
from distir.transforms.spmd.mesh import (
    Mesh,
    Partial,
    R,
    Replicate,
    Shard,
    Spec,
    local_shape,
    replicated,
)
from distir.transforms.spmd.outline import Copied, outline
from distir.transforms.spmd.redistribute import plan
from distir.transforms.spmd.replay import Replay
from distir.transforms.spmd.stage_values import StageValues, name_hint
from distir.transforms.spmd.stages import StagePartition
from distir.transforms.spmd.units import Schedule, schedule, stage_meshes
from distir.transforms.spmd.vocab import vocab_axis, write_vocab

__all__ = ["Schedule", "schedule", "lower_pipeline", "ranks_alike", "stage_meshes", "deferred_ops"]


def lower_pipeline(assignment: LayoutAssignment | Sequence[LayoutAssignment],
                   stages: StagePartition, sched: Schedule | None = None, *,
                   self_contained: bool = False, stage_functions: bool = True,
                   one_replica: bool = False, fold_tp: bool = False) -> Function:
    """The program of ``assignment`` cut in ``stages`` and run in ``sched`` (default: one
    microbatch, GPipe); verified. See the module docstring. With ``stage_functions``, the
    units of a stage and phase that are equal (microbatches after the first, as a rule)
    are calls of one function, and so are equal layers inside them (``outline``). With
    ``one_replica``, the program of data coordinate 0 alone (see "One replica"); with
    ``fold_tp`` too, of its tensor-parallel rank 0 alone where the ranks of every stage
    run alike (``ranks_alike``, else refused), each collective over the tensor axis being
    rank 0's part of one (``PeerAllreduce``, ``PeerAllgather``: ``StageValues._peer``;
    another raises ``Unfoldable``)."""
    sched = sched or schedule(stages)
    if sched.pp != stages.pp:
        raise TransformError(f"the schedule has {sched.pp} stages, the partition {stages.pp}")
    if one_replica and self_contained:
        raise TransformError("one_replica writes replica 0's placed program; "
                             "self_contained needs every replica's")
    if fold_tp and not (one_replica and ranks_alike(assignment, stages)):
        raise TransformError("fold_tp writes tensor-parallel rank 0 of replica 0 alone: it "
                             "needs one_replica and ranks that run alike (ranks_alike)")
    stages.check()
    pipe = _Pipe(assignment, stages, sched, one_replica, one_replica and fold_tp)
    fn = pipe.run(self_contained, stage_functions)
    if stage_functions:
        fn = outline(fn, pipe.runs, pipe.layer_runs, pipe.copied)
    bound = stages.prog.fn.initializers
    if bound:  # an imported model's weights: the same, or each device's piece of them
        fn.initializers = dict(bound) if self_contained else pipe.placed_initializers(bound)
    verify(fn, num_devices=_Pipe.device_count(assignment, stages.pp))
    return fn


def deferred_ops(assignment: LayoutAssignment | Sequence[LayoutAssignment],
                 stages: StagePartition, sched: Schedule) -> list[int]:
    """The forward and backward ops of ``stages.prog`` that ``lower_pipeline`` runs once
    after the microbatches (``_Pipe._deferred``), in program order."""
    return sorted(_Pipe(assignment, stages, sched).deferred)


def ranks_alike(assignment: LayoutAssignment | Sequence[LayoutAssignment],
                stages: StagePartition) -> bool:
    """Whether the tensor-parallel ranks (mesh axis 1 of a 2-axis mesh, more than one) of
    every stage run the same ops on equal local shapes, so that rank 0's program
    simulates as every rank's (``distir.analysis.replicas``): no op adds a bias on the
    tensor axis's coordinate 0 alone (``bias_once``). The placements split evenly
    (``check_spec``), so the local shapes are equal; a vocabulary-parallel op's constants
    of each rank (its first row, its class ids) are kept apart from equal constants
    (``vocab.Const``), so every rank holds as many."""
    per = [assignment] * stages.pp if isinstance(assignment, LayoutAssignment) else list(
        assignment)
    shape = per[0].mesh.shape
    if len(shape) != 2 or shape[1] < 2:
        return False
    prog = stages.prog
    for i in prog.live_ops:
        s = stages.stage[i]
        if s is None:
            continue
        a = per[s]
        reads, out = a.reads[i], a.outcomes[i]
        if not reads or out is None:
            continue
        op = prog.ops[i]
        if 1 in bias_once(op, reads, out.outs):
            return False
    return True


class _Pipe(StageValues):
    @staticmethod
    def device_count(a: LayoutAssignment | Sequence[LayoutAssignment], pp: int) -> int:
        if isinstance(a, LayoutAssignment):
            return a.mesh.size * pp
        return max(d for x in a for d in x.mesh.devices) + 1

    def __init__(self, a: LayoutAssignment | Sequence[LayoutAssignment], st: StagePartition,
                 sched: Schedule, one_replica: bool = False, fold: bool = False) -> None:
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
        self.assign = []
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
        self.inner = inner = self.meshes[0].size // shape[0]
        self.prank = [(c[0] // k) * inner + (r % inner) for r, c in enumerate(vm.coords)]
        self.written = 1 if one_replica else shape[0]
        """The replicas written: all, or replica 0 alone (its virtual ranks come first)."""
        self.fold = fold and len(shape) == 2 and inner > 1
        self.all = list(range(0, self.written * k * inner, inner if self.fold else 1))
        self.ranks_of = [[r for r in self.all if self.mb[r] == m] for m in range(k)]
        self.pieces, self.base, self.consts, self.running, self.memo = {}, {}, {}, {}, {}
        self.collapsed, self.sums, self.unsummed, self.vgroups = set(), {}, {}, {}
        self.held: list[tuple[Value, int, int]] = []
        """Pieces made in the current layer's run, to add to their running sums at its
        end (``_release``)."""
        self.prepared: dict[int, _Prepared] = {}
        self.shape_ins: dict[int, dict[int, list[Value | None]]] = {}
        self.suffixes: dict[tuple[int, int, bool], str] = {}
        self.devs_of: dict[int, tuple[int, ...]] = {}
        self.reads_of: dict[tuple[Value, bool], list[tuple[int, Spec, bool, bool]]] = {}
        """``_after``'s readers of a value (on other stages only, or all)."""
        self.acting: dict[Value, list[tuple[int, Spec, bool, bool]]] = {}
        """``_acting``'s readers of a value."""
        self.copied: dict[Op, Copied] = {}
        """The placeholders of copied units (``Replay.write``), for ``outline``."""
        self.runs: list[tuple[str, int, int]] = []
        """The op range of each unit of the schedule (``outline``)."""
        self.layer_runs: list[tuple[str, int, int]] = []
        """The op range of each repeated layer's ops in a unit, or among the updates
        (``outline``'s inner runs)."""
        structure = st.structure
        self.layer_of: dict[int, int] = {} if structure is None else {
            i: a for i, a in structure.anchor.items() if 1 <= a <= structure.num_layers}
        """The layer (``Structure``'s anchor) of each op of a repeated layer."""
        stages_of: dict[int, set[int | None]] = {}
        for i, layer in self.layer_of.items():
            stages_of.setdefault(layer, set()).add(st.stage[i])
        self.whole = {layer for layer, ss in stages_of.items() if len(ss) == 1}
        """The repeated layers whose ops are all on one stage."""
        self.origin: list[tuple[Value, Value, Spec, Mesh, int]] = []
        """Each placed parameter: ``(placed, sequential, spec, stage mesh, mesh rank)``."""
        self.stage = {i: s for i, s in enumerate(st.stage) if s is not None}
        self.home = {}
        for i in prog.live_ops:
            for o in prog.ops[i].outputs:
                self.home[o] = self.stage[i]
        self.deferred = self._deferred() if k > 1 else set()
        self.derived: dict[Any, Any] = per[0].derived if all(x is per[0] for x in per) \
            else {}
        """What the lowering derives from the one assignment of every stage alone (its
        ``derived``, shared by the configurations lowered from it)."""
        got = self.derived.get("readers")
        if got is None:
            readers: dict[Value, list[tuple[int, int]]] = {}  # (op index, input index) of
            for i in prog.live_ops:  # every live read but shape operands and an aligned
                op = prog.ops[i]  # lookup's indices (constants)
                aligned = aligned_axis(prog, op, self._reads(i) or ()) is not None
                for kk, v in enumerate(op.inputs):
                    if v is not None and not is_shape_operand(op, kk) and \
                            not (aligned and kk == 1):
                        readers.setdefault(v, []).append((i, kk))
            got = self.derived["readers"] = (index_only(prog, self._reads), readers)
        self.index_only: frozenset[int] = got[0]
        """Ops read only as an aligned lookup's indices: not written."""
        self.readers = got[1]
        """The readers of each value (never changed: shared with other lowerings)."""
        self.summed = self._summed_ops() if k > 1 else set()

    def _reads(self, i: int) -> tuple | None:
        """The specs op ``i`` reads on its stage (``None`` for an op on no stage)."""
        s = self.stage.get(i)
        return None if s is None else self.assign[s].reads[i]

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
                if src is rd:  # read as made: no step (most reads)
                    continue
                if any(x.axis == 0 and x.kind != "split" for x in plan(src, rd)):
                    out.add(i)
                    break
        return out

    def _summed_ops(self) -> set[int]:
        """The ops run once after the microbatches (updates, deferred ops) that read a
        value partial on the data axis and keep it so: every result partial on it, every
        input read partial or whole on it, a bias not added once on it (``bias_once``),
        not vocabulary-parallel. By its layout rule such an op is linear in its partial
        inputs, so it runs once per device on each device's sum over its microbatches
        (``_summed``; its results ``collapsed``), not on each microbatch's piece."""
        prog, st = self.prog, self.st
        out: set[int] = set()
        for i in prog.live_ops:
            s = self.stage[i]
            a = self.assign[s]
            reads, got = a.reads[i], a.outcomes[i]
            if self.per_mb(i) or not reads or got is None or st.phase[i] == "H":
                continue
            op = prog.ops[i]
            firsts = [rd[0] for rd in reads if rd is not None]
            if all(o is not None and isinstance(o[0], Partial) for o in got.outs) and \
                    any(isinstance(x, Partial) for x in firsts) and \
                    all(isinstance(x, Partial | Replicate) for x in firsts) and \
                    0 not in bias_once(op, reads, got.outs) and \
                    vocab_axis(prog, op, reads) is None:
                out.add(i)
        return out

    def per_mb(self, i: int) -> bool:
        """Whether op ``i`` runs once per microbatch (in the schedule's units)."""
        return self.st.phase[i] in ("F", "B") and i not in self.deferred

    # -- the program -------------------------------------------------------------------------
    def run(self, self_contained: bool, outlined: bool = False) -> Function:
        """The program written out, but where ``outlined``: then a copied unit that
        ``outline`` makes a call is a placeholder (``copied``)."""
        prog, st = self.prog, self.st
        self._params(self_contained)
        for i in prog.live_ops:  # independent of the batch: once, before the microbatches
            if st.phase[i] == "H" and self._reads(i) and i not in self.index_only:
                self._op(i, self.all)
        units: dict[tuple[str, int], list[int]] = {(ph, s): [] for ph in "FB"
                                                    for s in range(self.pp)}
        for i in prog.live_ops:  # each stage's forward and backward ops, in program order
            ph, s = st.phase[i], st.stage[i]
            if ph in ("F", "B") and s is not None and self.assign[s].reads[i] and \
                    i not in self.deferred and i not in self.index_only:
                units[(ph, s)].append(i)
        early = {s: self._early_updates(units[("B", s)]) for s in range(self.pp)}
        pulled = {u for e in early.values() for lst in e.values() for u in lst}
        replay = Replay(self, units)
        sent = {i: [o for o in prog.ops[i].outputs if self._reads_of(o, True)]
                for lst in units.values() for i in lst}  # read on other stages
        acting = {i: [o for o in prog.ops[i].outputs if self._acting(o)]
                  for lst in units.values() for i in lst}  # served after each microbatch
        segments = {u: _segments(lst, self.layer_of) for u, lst in units.items()}
        copies = LayerCopies(self)  # repeated layers as placeholders (``layer_copy``)
        for tick in self.sched.ticks:
            made: list[tuple[int, int]] = []
            for kind, s, m in tick:
                start = len(self.b.ops)
                phase = "fwd" if kind == "F" else "bwd"
                made.extend((i, m) for i in units[(kind, s)])
                if replay.copies(kind, s, m):  # a middle microbatch: a copy of the first's
                    replay.write(kind, s, m, outlined)
                else:
                    replay.start(kind, s, m)
                    n_layers = len(self.layer_runs)
                    layers = _Layers(self, f"layer_{phase}")
                    pull = early[s] if kind == "B" and m == self.k - 1 else {}
                    for u in (u for lst in pull.values() for u in lst):
                        self._shape_ins(u)  # before the layers, so that they stay alike
                    ranks = self.ranks_of[m]
                    copies.unit()
                    worth = copies.worth(kind, s, segments[(kind, s)]) if outlined and \
                        not replay.recorded(m) else ()  # (a template of units: written out)
                    for _, seg in segments[(kind, s)]:
                        layers.at(seg[0])
                        snap = None
                        if seg in worth and not any(i in pull for i in seg):
                            if copies.copy(seg):  # a layer like one before: a placeholder
                                continue
                            snap = copies.start(seg)
                        at = len(self.b.ops)
                        for i in seg:
                            self._op(i, ranks)
                            for o in acting[i]:
                                self._after(o, m, other_stages=False)
                            for u in pull.get(i, ()):  # an update finishing a gradient:
                                self._op(u, self.all)  # now (in i's layer run, if any)
                        if snap is not None:
                            self._release()  # as ``layers.at`` would, next
                            copies.record(seg, m, snap, at)
                    layers.at(None)
                    replay.written(kind, s, m, start, n_layers)
                self.runs.append((f"stage{s}_{phase}", start, len(self.b.ops)))
            for i, m in made:  # transfers after the tick's units, so stages overlap
                for o in sent[i]:
                    self._after(o, m, other_stages=True)
        layers = _Layers(self, "layer_upd")
        for i in prog.live_ops:  # the updates (and deferred ops): once, after the microbatches
            if (st.phase[i] == "U" or i in self.deferred) and i not in pulled and \
                    self.assign[st.stage[i]].reads[i]:  # type: ignore[index]
                layers.at(i if st.phase[i] == "U" else None)
                self._op(i, self.all)
        layers.at(None)
        return self.b.ret(*self._returns(self_contained))

    def _early_updates(self, unit: list[int]) -> dict[int, list[int]]:
        """The update-phase ops that finish a gradient of ``unit`` (a stage's backward ops)
        before it is summed: each reads a value of the unit (or of another such op) still
        partial on the data axis and nothing made after the unit (a bias gradient's
        ``Reshape``, which a training step writes at its end), and its results are read on
        no other stage (a ``Send`` would wait for that stage's backward pass). Keyed by
        the op of the unit that makes the last of its inputs: it runs right after that op
        in the last microbatch's unit, so that the sum over the data axis its
        readers need (``_after``) starts as soon as the gradient is made and overlaps the
        rest of the backward pass, as ``dtp``'s early all-reduces and PyTorch's
        DistributedDataParallel do. The optimizer steps, which read the gradients summed,
        stay after the microbatches; with one replica (no all-reduce to overlap) every
        update-phase op does."""
        prog, st = self.prog, self.st
        if not unit or self.vmesh.shape[0] == self.k:  # one replica: nothing to overlap
            return {}
        s = st.stage[unit[0]]
        assert s is not None
        where = {i: n for n, i in enumerate(unit)}
        slot: dict[int, int] = {}  # a pulled op -> the op of the unit it runs after
        for u in prog.live_ops:
            reads = self.assign[s].reads[u]
            if st.phase[u] != "U" or st.stage[u] != s or u in self.deferred or not reads or \
                    any(st.stage[j] != s for o in prog.ops[u].outputs
                        for j, _ in self.readers.get(o, ())):  # sent: after the backward
                continue
            partial, at = False, -1
            for v, rd in zip(prog.ops[u].inputs, reads, strict=True):
                j = prog.producer.get(v) if v is not None else None
                if j is None or st.phase[j] == "H" or not self.assign[s].reads[j]:
                    continue  # made before the units, or known before running
                if j in where or j in slot:
                    at = max(at, where[j] if j in where else where[slot[j]])
                    partial = partial or (rd is not None and isinstance(rd[0], Partial))
                elif not (self.per_mb(j) and st.stage[j] == s and st.phase[j] == "F"):
                    break  # made later than the unit (the forward units come before it)
            else:
                if partial:
                    slot[u] = unit[at]
        out: dict[int, list[int]] = {}
        for u, i in slot.items():
            out.setdefault(i, []).append(u)
        return out

    def _params(self, self_contained: bool) -> None:
        prog, b = self.prog, self.b
        types: dict[tuple, TensorType] = {}  # one object per placed type (immutable)
        prank, ranks, n = self.prank, self.all, self.all[-1] + 1
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
                placed: dict[int, Value] = {}
                for j in self.pranks():
                    d = mesh.devices[j]
                    key = (t.dtype, shp, d)
                    ty = types.get(key)
                    if ty is None:
                        ty = types[key] = TensorType(t.dtype, shp, d)
                    placed[j] = b.param(f"{p.name}_d{d}", ty)
                self.origin.extend((x, p, spec, mesh, j) for j, x in placed.items())
                lst = [None] * n  # ``each``
                for r in ranks:
                    lst[r] = placed[prank[r]]
                if self.k > 1 and isinstance(spec[0], Shard):  # the replica's microbatches
                    if spec[0].groups != 1:
                        raise TransformError(f"parameter %{p.name} is split in groups along "
                                             "the data axis: cannot cut it in microbatches")
                    parts = [b.op("Split", x, axis=spec[0].dim, num_outputs=self.k,
                                  name=[f"{p.name}_mb{m}_d{x.type.device}"  # type: ignore
                                        for m in range(self.k)]) for x in placed.values()]
                    at = dict(zip(placed, parts, strict=True))
                    lst = self.each(lambda r, at=at: at[self.prank[r]][self.mb[r]])
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
                            self.b.op("Send", lst[0], device=dev, name=name_hint(v)))
                continue
            spec = self.spec(v, s)
            summed = tuple(R if isinstance(x, Partial) else x for x in spec)
            lst = self.get(v, s, summed, self.all)
            for j in self.pranks():
                own = [lst[r] for r in self.all if self.prank[r] == j]
                if self.k > 1 and isinstance(summed[0], Shard):
                    rets.append(self.b.op("Concat", *own, axis=summed[0].dim,
                                          name=f"{name_hint(v)}_d{self.meshes[s].devices[j]}"))
                else:
                    rets.append(own[0])  # type: ignore[arg-type]
        return rets

    # -- ops -------------------------------------------------------------------------------
    def _prepared(self, i: int) -> _Prepared:
        """What writing op ``i`` needs that does not depend on the microbatch, made once."""
        got = self.prepared.get(i)
        if got is None:
            s = self.st.stage[i]
            assert s is not None
            op, a, vm = self.prog.ops[i], self.assign[s], self.vmesh
            reads = a.reads[i]
            key = ("prepared", i, vm.shape)
            parts = self.derived.get(key)
            if parts is None:  # of the assignment and the mesh shape alone
                out = a.outcomes[i]
                assert reads and out is not None
                if op.op_type in BROADCASTS:
                    out = made_as(self.prog, op, out, self._read_as(op.outputs[0]))
                scaled = tuple((k, int(np.prod([vm.shape[ax] for ax in axes])))
                               for k, axes in enumerate(out.scaled) if axes)
                attrs = {k: normalize_attr(v) for k, v in local_attrs(op, reads, vm).items()}
                aligned = aligned_axis(self.prog, op, reads) is not None
                parts = self.derived[key] = (
                    out.outs, attrs, bias_once(op, reads, out.outs), scaled,
                    tuple(None if o.name == "_" else name_hint(o) for o in op.outputs),
                    vocab_axis(self.prog, op, reads) is not None, aligned,
                    self._kinds(op, aligned))
            outs, attrs, once, scaled, hints, vocab, aligned, kinds = parts
            assert reads is not None
            got = self.prepared[i] = _Prepared(
                s, op, reads, outs, attrs, self.per_mb(i), once, scaled, hints, vocab,
                aligned, kinds, self._devs(s), i in self.summed, i)
            if self.st.phase[i] == "H" and op.inputs and not got.vocab:
                # independent of the batch: equal ops on equal values are one value on a
                # device (each layer's causal mask, as ``dtp``'s ``Plan.canon``)
                got.form = (op.op_type, tuple(sorted(attrs.items())), got.outs, got.scaled,
                            got.once)
            got.fresh = self._fresh(got)
        return got

    def _fresh(self, pre: _Prepared) -> bool:
        """Whether ``pre``'s op runs per microbatch on a value of its microbatch alone at
        every rank, so that no two of its ops written are equal (``_Pipe.memo`` would
        never find one): one microbatch, or an input (of those it reads on every rank)
        made by such an op before, or a batch input cut in microbatches."""
        if not pre.per_mb:
            return False
        if self.k == 1:
            return True
        prog, op = self.prog, pre.op
        for k, how in enumerate(pre.kinds[:2] if pre.once else pre.kinds):
            if how != _READ:
                continue
            v = op.inputs[k]
            j = prog.producer.get(v)  # type: ignore[arg-type]
            if j is None:
                if v in prog.param_set and isinstance(self.spec(v, pre.s)[0], Shard):  # type: ignore[arg-type]
                    return True
            else:
                made = self.prepared.get(j)
                if made is not None and made.fresh:
                    return True
        return False

    @staticmethod
    def _kinds(op: Op, aligned: bool) -> tuple[int, ...]:
        """How ``_op`` finds each input of ``op``: ``_OMITTED``, ``_SHAPE`` (a shape
        operand's constants), ``_ALIGNED`` (an aligned lookup's indices) or ``_READ``."""
        return tuple(_OMITTED if v is None else _SHAPE if is_shape_operand(op, k) else
                     _ALIGNED if k == 1 and aligned else _READ
                     for k, v in enumerate(op.inputs))

    def _devs(self, s: int) -> tuple[int, ...]:
        """The device of each virtual rank on stage ``s`` (up to the last written)."""
        got = self.devs_of.get(s)
        if got is None:
            got = self.devs_of[s] = tuple(self.dev(s, r) for r in range(self.all[-1] + 1))
        return got

    def _suffix(self, s: int, r: int, per_mb: bool) -> str:
        """The end of a piece's name on stage ``s`` at virtual rank ``r`` (``name``)."""
        key = (s, r, per_mb)
        got = self.suffixes.get(key)
        if got is None:
            got = self.suffixes[key] = self.name("", s, r, per_mb)
        return got

    def _op(self, i: int, rs: list[int]) -> None:
        """Write op ``i`` for the virtual ranks ``rs``, with the redistributions its inputs
        need first (one microbatch's ranks in a unit; all of them once)."""
        b, vm = self.b, self.vmesh
        pre = self.prepared.get(i) or self._prepared(i)
        s, op = pre.s, pre.op
        size = vm.size
        ins: list[list[Value | None]] = []
        pieces = self.pieces
        for k, how in enumerate(pre.kinds):
            if how == _READ:
                v, sp = op.inputs[k], pre.reads[k]
                assert v is not None
                if pre.summed and isinstance(sp[0], Partial) and v not in self.collapsed:
                    v = self._summed(v)  # each device's sum over its microbatches
                made = pieces.get((v, s))  # placed so already (``get``'s first case)
                lst = None if made is None else made.get(sp)
                if lst is None or None in map(lst.__getitem__, rs):
                    lst = self.get(v, s, sp, rs)
                ins.append(lst)
            elif how == _OMITTED:
                ins.append([None] * size)
            elif how == _SHAPE:
                ins.append(self._shape_ins(i)[k])
            else:  # known indices: each device's, at its rows
                ins.append(self._aligned_ins(i, rs))
        per_mb = pre.per_mb
        got_at: list[tuple] = []  # the results at each rank of ``rs``, in order
        if pre.vocab:  # its collectives span a group
            group = (i, tuple(id(x[r]) for r in rs for x in ins))
            every = self.memo.get(group)
            if every is None:
                every = write_vocab(b, self.prog, vm, op, pre.reads, ins, rs,
                                    lambda r: self.dev(s, r), self.const,
                                    [self.name(op.outputs[0], s, r, per_mb)
                                     for r in range(size)])
                every = self.memo[group] = [None if v is None else
                                          self._scaled(pre, (v,), r)[0]
                                          for r, v in enumerate(every)]
            got_at = [(every[r],) for r in rs]
        else:
            devs, memo, form, once, fresh = pre.devs, self.memo, pre.form, pre.once, pre.fresh
            coords, emit, hints = vm.coords, b.ops.append, pre.hints
            suffixes = self.suffixes
            for r in rs:
                d = devs[r]
                args = [x[r] for x in ins]
                if once and any(coords[r][ax] for ax in once):  # the bias: once
                    args = args[:2]
                key = None if fresh else (form, d, tuple(map(id, args)))
                got = None if key is None else memo.get(key)
                if got is None:
                    attrs = pre.attrs  # shared: an op's attributes are immutable
                    if not op.inputs:
                        attrs = {**attrs, "device": d}
                    suffix = suffixes.get((s, r, per_mb)) or self._suffix(s, r, per_mb)
                    vals = tuple([Value("_" if h is None else h + suffix) for h in hints])
                    emit(Op(op.op_type, args, attrs, vals))
                    got = self._scaled(pre, vals, r) if pre.scaled else vals
                    if key is not None:
                        memo[key] = got
                got_at.append(got)
        base = self.base
        for k, o in enumerate(op.outputs):
            key2 = (o, s)
            cache = pieces.get(key2)
            if cache is None:
                cache = pieces[key2] = {}
            spec = pre.outs[k]
            base[key2] = spec
            lst = cache.get(spec)
            if lst is None:
                lst = cache[spec] = [None] * size
            for r, got in zip(rs, got_at):
                lst[r] = got[k]
        if pre.summed:
            self.collapsed.update(op.outputs)
        if not per_mb:
            for o in op.outputs:
                self._after(o, None, other_stages=False)
                self._after(o, None, other_stages=True)

    def _read_as(self, v: Value) -> set[Spec]:
        """Every spec ``v`` is read in (a result: whole)."""
        out = {replicated(self.vmesh)} if v in self.prog.fn.returns else set()
        for j, k in self.readers.get(v, ()):
            reads = self.assign[self.stage[j]].reads[j]
            if reads and reads[k] is not None:
                out.add(reads[k])  # type: ignore[arg-type]
        return out

    def _scaled(self, pre: _Prepared, vals: tuple, r: int) -> tuple:
        """Rank ``r``'s results of ``pre``'s op, those that are means over split axes
        scaled by ``1/`` their devices (see ``Outcome``)."""
        if not pre.scaled:
            return vals
        d = self.dev(pre.s, r)
        for k, n in pre.scaled:
            o = pre.op.outputs[k]
            c = self.const(np.asarray(1.0 / n, dtype=self.prog.type(o).dtype.np), d,
                           f"{name_hint(o)}_scale")
            vals = vals[:k] + (self.b.op("Mul", vals[k], c,
                                         name=self.name(o, pre.s, r, pre.per_mb)),) + vals[k + 1:]
        return vals

    def _after(self, v: Value, m: int | None, other_stages: bool) -> None:
        """Right after ``v`` is made (for microbatch ``m``, or once), ``other_stages``
        false: the redistributions its readers need on its own stage, and those made before
        it is sent to other stages; after the tick's units, ``other_stages`` true: the
        sends, and the redistributions after them. So communication overlaps later work. A
        reader that runs once after the microbatches is served after the last one."""
        reads_of = self._acting(v) if m is not None and not other_stages else \
            self._reads_of(v, other_stages)
        if not reads_of:
            return
        s0 = self.home[v]
        rs = self.ranks_of[m] if m is not None else self.all
        for s, rd, per_mb, summed in reads_of:
            want, x = rs, v
            if m is not None and not per_mb:
                if not other_stages and self.k > 1 and (summed or not isinstance(rd[0],
                                                                                 Partial)):
                    if m < self.k - 1 and self.layer_of.get(self.prog.producer[v]) in \
                            self.whole:  # added at the end of its layer (``_release``)
                        self.held.append((v, s0, m))
                    else:  # now: its sum over the replicas starts right away
                        self._accumulate(v, s0, m)
                if m != self.k - 1:
                    continue
                want = self.all
                if summed:  # its reader runs on the sums (``_summed``)
                    x = self._summed(v)
            if other_stages:
                self.get(x, s, rd, want)
            elif s != s0:
                self.get(x, s0, self._tau(x, s, rd), want)
            elif rd != self.spec(v, s0):
                self.get(x, s, rd, want)

    def _release(self) -> None:
        """Add the pieces ``held`` to their running sums. A microbatch's gradient pieces
        (but the last microbatch's, whose sums are all-reduced as soon as complete) are
        added at the end of their layer's backward run, as ``dtp`` adds them, when that
        layer's activations are freed: added as each is made, the old and new sums and
        the piece would be live together beside them, at the stage's peak."""
        held, self.held = self.held, []
        for v, s, m in held:
            self._accumulate(v, s, m)

    def _acting(self, v: Value) -> list[tuple[int, Spec, bool, bool]]:
        """``_reads_of(v, False)`` but the readers that ``_after(v, m, False)`` leaves
        alone for a microbatch ``m``: those run per microbatch on ``v``'s stage reading
        it as made. Made once."""
        got = self.acting.get(v)
        if got is None:
            s0 = self.home[v]
            made = self.spec(v, s0)
            got = self.acting[v] = [x for x in self._reads_of(v, False)
                                    if not (x[2] and x[0] == s0 and x[1] == made)]
        return got

    def _reads_of(self, v: Value, other_stages: bool) -> list[tuple[int, Spec, bool, bool]]:
        """``(stage, spec, per microbatch, on the sums)`` of every reader of ``v`` (on
        other stages only, with ``other_stages``), made once; ``on the sums``: it reads
        each device's sum over its microbatches of ``v``, made once per microbatch
        (``_summed``)."""
        got = self.reads_of.get((v, other_stages))
        if got is None:  # both lists at once
            every: list[tuple[int, Spec, bool, bool]] = []
            others: list[tuple[int, Spec, bool, bool]] = []
            readers = self.readers.get(v)
            if readers:
                home, j = self.home.get(v), self.prog.producer.get(v)
                from_mb = j is not None and self.per_mb(j)
                stage, assign, summed = self.stage, self.assign, self.summed
                for i, k in readers:
                    s = stage[i]
                    reads = assign[s].reads[i]
                    rd = reads[k] if reads else None
                    if rd is not None:
                        x = (s, rd, self.per_mb(i), from_mb and i in summed
                             and isinstance(rd[0], Partial))
                        every.append(x)
                        if s != home:
                            others.append(x)
            self.reads_of[(v, False)], self.reads_of[(v, True)] = every, others
            got = others if other_stages else every
        return got

    def _shape_ins(self, i: int) -> dict[int, list[Value | None]]:
        """The constants of op ``i``'s shape operands on every rank (by input index),
        made the first time they are asked for."""
        got = self.shape_ins.get(i)
        if got is None:
            pre = self._prepared(i)
            got = self.shape_ins[i] = {
                k: self._shape_operand(pre.op, k, pre.outs, pre.s)
                for k, v in enumerate(pre.op.inputs)
                if v is not None and is_shape_operand(pre.op, k)}
        return got

    def _aligned_ins(self, i: int, rs: list[int]) -> list[Value | None]:
        """The indices of op ``i``, a lookup of known indices aligned with its split data
        (``aligned``), at the virtual ranks ``rs``: each device's block, shifted to its
        rows, as a constant."""
        pre, vm = self._prepared(i), self.vmesh
        out: list[Value | None] = [None] * vm.size
        hint = name_hint(pre.op.inputs[1])  # type: ignore[arg-type]
        for r in rs:
            arr = local_indices(self.prog, pre.op, pre.reads, vm, vm.coords[r])
            out[r] = self.const(arr, pre.devs[r], hint)
        return out

    def _shape_operand(self, op: Op, k: int, outs: tuple, s: int) -> list[Value | None]:
        prog = self.prog
        if op.op_type == "Split":
            arr = split_sizes(prog, op, k, outs, self.vmesh)
        else:
            shp = local_shape(prog.shape(op.outputs[0]), outs[0], self.vmesh)
            arr = np.asarray(shp, dtype=np.int64)
        hint = "sizes" if op.op_type == "Split" else "shape"
        return self.on_devices(s, arr, hint)


_OMITTED, _SHAPE, _ALIGNED, _READ = range(4)
"""How ``_Pipe._op`` finds an input (``_Prepared.kinds``)."""


@dataclass(slots=True, eq=False)
class _Prepared:
    """One op of the sequential program as ``_Pipe._op`` writes it: its stage, reads and
    results' specs, local attributes (normalized), whether it runs per microbatch, the
    mesh axes that add its bias once (``bias_once``), the results scaled by ``1/n``
    (``(result index, n)``), its results' name hints (``None`` for an unused one),
    whether it is a vocabulary-parallel op (``vocab.write_vocab`` writes it), whether it
    is a lookup of known indices aligned with its split data (``aligned``), how each
    input is found (``_Pipe._kinds``), the device of each virtual rank on its stage and whether it
    runs on each device's sums over its microbatches (``_Pipe.summed``)."""

    s: int
    op: Op
    reads: tuple
    outs: tuple
    attrs: dict
    per_mb: bool
    once: tuple[int, ...]
    scaled: tuple[tuple[int, int], ...]
    hints: tuple[str | None, ...]
    vocab: bool
    aligned: bool
    kinds: tuple[int, ...]
    devs: tuple[int, ...]
    summed: bool
    form: Any
    """The op's key among the ops written (``_Pipe.memo``): its index, or for a
    batch-independent op its type, attributes and results' specs."""
    fresh: bool = False
    """Whether no two of its ops written are equal (``_Pipe._fresh``): not memoized."""


class _Layers:
    """Cuts the ops written in a row into the runs of one repeated layer each
    (``_Pipe.layer_runs``): ``at(i)`` before writing sequential op ``i``'s ops (``None``
    before ops of no layer, and at the end)."""

    def __init__(self, pipe: _Pipe, label: str) -> None:
        self.pipe, self.label = pipe, label
        self.layer: int | None = None
        self.start = 0

    def at(self, i: int | None) -> None:
        layer = None if i is None else self.pipe.layer_of.get(i)
        if layer == self.layer:
            return
        self.pipe._release()  # the layer's pieces into their running sums, in its run
        here = len(self.pipe.b.ops)
        if self.layer is not None:
            self.pipe.layer_runs.append((self.label, self.start, here))
        self.layer, self.start = layer, here


def _segments(unit: list[int], layer_of: dict[int, int]
              ) -> list[tuple[int | None, tuple[int, ...]]]:
    """``unit``'s ops cut into runs of one layer each (``None``: of no layer)."""
    out: list[tuple[int | None, list[int]]] = []
    for i in unit:
        layer = layer_of.get(i)
        if not out or out[-1][0] != layer:
            out.append((layer, []))
        out[-1][1].append(i)
    return [(layer, tuple(seg)) for layer, seg in out]


def _block(arr: np.ndarray, pl: Shard, n: int, c: int) -> np.ndarray:
    """Block ``c`` of ``n`` of ``arr`` along ``pl.dim`` (of every group, joined)."""
    d, g = pl.dim, pl.groups
    shp = arr.shape
    grouped = arr.reshape(shp[:d] + (g, shp[d] // g) + shp[d + 1:])
    part = np.split(grouped, n, axis=d + 1)[c]
    return part.reshape(shp[:d] + (shp[d] // n,) + shp[d + 1:])
