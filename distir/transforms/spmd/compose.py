"""``dtp`` as a composition of passes on layout assignments.

``compose_dtp(fn, dp, tp, pp, microbatches, schedule)`` runs, each pass returning something
that prints and checks on its own:

1. seeds from ``dtp``'s analysis (``distir.transforms.analyze``): the batch inputs
   ``Shard`` along their batch axis on the data axis of a ``(dp, tp)`` mesh, the weights
   ``dtp`` splits for ``tp`` (Megatron's column/row pairs, attention by heads)
   ``Shard`` on the tensor axis;
2. ``propagate`` on the stage sub-mesh (its data axis counting ``dp·K`` virtual replicas,
   see ``pipeline``) -> ``LayoutAssignment``;
3. ``partition_stages(fn, pp)`` -> ``StagePartition`` (``dtp``'s cost-balanced cuts);
4. ``schedule(stages, K, kind)`` -> ``Schedule`` (GPipe or 1F1B ticks);
5. ``lower_pipeline`` -> the verified program (equal units of the schedule as calls of
   stage functions, ``outline``).

``plan_dtp`` returns the passes' outputs (``Composed``); ``compose_dtp`` the program.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from distir._util import no_gc
from distir.analysis.replicas import ReplicaProgram
from distir.errors import TransformError
from distir.ir.core import Function, Module, Value
from distir.transforms.plan import as_analysis, check_batch, check_layers
from distir.transforms.program import Program
from distir.transforms.spmd.assignment import LayoutAssignment
from distir.transforms.spmd.mesh import Mesh, R, Shard, Spec
from distir.transforms.spmd.pipeline import Schedule, lower_pipeline, ranks_alike, schedule
from distir.transforms.spmd.propagate import propagate
from distir.transforms.spmd.stage_values import NoReplicaForm, Unfoldable
from distir.transforms.spmd.stages import StagePartition, partition_stages

if TYPE_CHECKING:
    from distir.transforms.plan import Analysis

__all__ = ["Composed", "plan_dtp", "compose_dtp", "compose_dtp_replica", "dtp_layout_seeds"]


@dataclass(frozen=True, eq=False)
class Composed:
    """The passes' outputs: ``assignment`` (on one stage's ``(dp, tp)`` mesh), ``stages``,
    ``sched``; ``lower()`` writes the program."""

    assignment: LayoutAssignment
    stages: StagePartition
    sched: Schedule

    def lower(self, self_contained: bool = False, stage_functions: bool = True) -> Function:
        with no_gc():  # many objects, almost no garbage (as dtp)
            return lower_pipeline(self.assignment, self.stages, self.sched,
                                  self_contained=self_contained,
                                  stage_functions=stage_functions)

    def lower_replica(self, stage_functions: bool = True, fold_tp: bool = True,
                      ) -> ReplicaProgram:
        """The program of data-parallel replica 0 alone (devices ``0 .. tp·pp-1``), each
        sum or gather over the replicas its part of one (``ReplicaAllreduce``,
        ``ReplicaAllgather``), as a
        ``ReplicaProgram``: ``distir.simulate`` gives the figures of ``lower()``'s program
        of every replica, at a cost that does not grow with ``dp`` (as ``dtp_replica``).
        Where a collective over the replicas has no replica-0 form (a reduce-scatter), the
        program of every replica, as a ``ReplicaProgram`` of one replica."""
        mesh = self.assignment.mesh
        tp = mesh.size // mesh.shape[0]
        fold = fold_tp and self.folds()
        with no_gc():
            try:
                try:
                    fn = lower_pipeline(self.assignment, self.stages, self.sched,
                                        stage_functions=stage_functions, one_replica=True,
                                        fold_tp=fold)
                except Unfoldable:  # a collective over the ranks with no rank-0 form
                    fold = False
                    fn = lower_pipeline(self.assignment, self.stages, self.sched,
                                        stage_functions=stage_functions, one_replica=True)
            except NoReplicaForm:  # a collective over the replicas with no replica-0
                fn = self.lower(stage_functions=stage_functions)  # form: every replica
                return ReplicaProgram(fn, 1, mesh.size * self.stages.pp)
        return ReplicaProgram(fn, mesh.shape[0], tp * self.stages.pp, tp if fold else 1)

    def deferred(self) -> list[int]:
        """The forward and backward ops (indices into ``stages.prog.ops``) that run once
        after the microbatches, not in the schedule's units: those reading a value
        gathered over the batch, and every one reading their results (``lower_pipeline``'s
        module docstring)."""
        from distir.transforms.spmd.pipeline import deferred_ops

        return deferred_ops(self.assignment, self.stages, self.sched)

    def folds(self) -> bool:
        """Whether ``lower_replica`` writes tensor-parallel rank 0 alone (the ranks of
        every stage run alike: ``pipeline.ranks_alike``), so that it writes ``pp``
        devices, not ``tp·pp`` (unless a collective over the ranks has no rank-0 form)."""
        return ranks_alike(self.assignment, self.stages)

    def dumps(self) -> str:
        return (self.assignment.dumps() + "\n" + self.stages.dumps() + "\n"
                + self.sched.dumps())


def dtp_layout_seeds(prog: Program, analysis: Any, data: bool, tp: int,
                     ) -> dict[Value | str, Spec]:
    """Seeds on a ``(data, tensor)`` mesh from ``dtp``'s analysis of ``prog``: batch inputs
    split along their batch axis on axis 0 (when ``data``), the weights ``dtp`` splits for
    ``tp`` ranks split on axis 1 (when ``tp > 1``, in interleaved groups where ``dtp``
    uses them), and the zero tensors ``dtp`` splits (the rows a vocabulary-split
    embedding's gradient is scattered into, on axis 1 for ``tp``; those a gradient of a
    gather from a flattened batch is scattered into, on axis 0: made whole, no reader would
    split them) pinned so."""
    from distir.transforms.layout import B, T

    sh = analysis.sharding.for_tp(tp) if tp > 1 else analysis.sharding
    seeds: dict[Value | str, Spec] = {}
    made = [o for i in prog.live_ops for o in prog.ops[i].outputs]
    for v in list(prog.fn.params) + (made if tp > 1 or data else []):
        lay = sh.layout.get(v)
        if lay is None or (v not in prog.param_set and not (
                (T in lay.marks and tp > 1 or B in lay.marks and data) and prog.is_zeros(v))):
            continue
        spec: list[Any] = [R, R]
        for a, m in enumerate(lay.marks):
            if m == B and data and (v in sh.data or v not in prog.param_set):
                spec[0] = Shard(a)
            elif m == T and tp > 1:
                spec[1] = Shard(a, groups=lay.groups)
        if spec != [R, R]:
            seeds[v] = tuple(spec)
    return seeds


def plan_dtp(fn: Function | Module | Program | Analysis, dp: int = 1, tp: int = 1,
             pp: int = 1, microbatches: int = 1, schedule_kind: str = "1f1b", *,
             hardware: Any = None, batch_inputs: Sequence[str] | None = None,
             ) -> Composed:
    """Steps 1-4 of the module docstring for ``dp·tp·pp`` devices and ``microbatches``.

    ``fn`` may be an ``Analysis`` (``distir.transforms.analyze(fn, batch_inputs,
    hardware=...)``, as ``dtp`` takes one): configurations planned from one analysis share
    its program, sharding, structure and stage cuts, and the op rules' memo per mesh shape
    (``OpRules.of``), so a search over many configurations analyses the model once. Then
    ``hardware`` and ``batch_inputs`` are the analysis's (passing them raises)."""
    for name, v in (("dp", dp), ("tp", tp), ("pp", pp), ("microbatches", microbatches)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise TransformError(f"{name} must be a positive integer, got {v!r}")
    with no_gc():  # many objects, almost no garbage (as dtp)
        an = as_analysis(fn, batch_inputs, hardware, "plan_dtp")
        prog = an.prog
        nb = dp * microbatches
        check_batch(an, dp, microbatches)  # the constraints' messages, as dtp's tower's
        check_layers(an, pp)
        # propagated on the virtual mesh (microbatches as replicas), lowered per stage mesh
        # (which checks it on the virtual mesh again: propagate's result passes); the same
        # for every configuration of this analysis with as many virtual replicas and ranks
        key = ("spmd.plan_dtp", an.sharding, nb, tp)
        wide = prog.derived.get(key)
        if wide is None:
            seeds = dtp_layout_seeds(prog, an, nb > 1, tp)
            wide = prog.derived[key] = propagate(prog, Mesh.of(nb, tp), seeds).passes()
        a = wide.on(Mesh.of(dp, tp))
        skey = ("spmd.partition_stages", an.structure, an.partition, pp)
        stages = prog.derived.get(skey)  # the same for every configuration of ``pp`` stages
        if stages is None:
            stages = prog.derived[skey] = partition_stages(an, pp)
        return Composed(a, stages, schedule(stages, microbatches, schedule_kind))


def compose_dtp(fn: Function | Module | Program | Analysis, dp: int = 1, tp: int = 1,
                pp: int = 1, microbatches: int = 1, schedule_kind: str = "1f1b", *,
                self_contained: bool = False, hardware: Any = None,
                batch_inputs: Sequence[str] | None = None, stage_functions: bool = True,
                ) -> Function:
    """``dtp``'s configuration as a composition of passes (see the module docstring); the
    devices are numbered as ``dtp`` numbers them. Verified. ``fn`` may be an ``Analysis``
    shared by many configurations (see ``plan_dtp``); ``hardware`` (default
    ``"h100-sxm"``) weighs the stage cuts."""
    return plan_dtp(fn, dp, tp, pp, microbatches, schedule_kind, hardware=hardware,
                    batch_inputs=batch_inputs).lower(self_contained, stage_functions)


def compose_dtp_replica(fn: Function | Module | Program | Analysis, dp: int = 1, tp: int = 1,
                        pp: int = 1, microbatches: int = 1, schedule_kind: str = "1f1b", *,
                        hardware: Any = None, batch_inputs: Sequence[str] | None = None,
                        stage_functions: bool = True, fold_tp: bool = True) -> ReplicaProgram:
    """``compose_dtp``'s program of data-parallel replica 0 alone (``Composed.lower_replica``),
    as ``dtp_replica`` writes ``dtp``'s: simulated, it gives the figures of the program of
    every replica. Placed parameters (replica 0's pieces). With ``fold_tp``, where the
    tensor-parallel ranks run alike, of its rank 0 alone (``peers = tp``), as
    ``dtp_replica(fold_tp=True)``."""
    return plan_dtp(fn, dp, tp, pp, microbatches, schedule_kind, hardware=hardware,
                    batch_inputs=batch_inputs).lower_replica(stage_functions, fold_tp)
