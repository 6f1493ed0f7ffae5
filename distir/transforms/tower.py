"""The builder tower: ``dtp`` as it was written before the spmd passes (issue 16, part 6).

``distir.transforms.dtp`` is now the composition of the spmd passes
(``distir.transforms.spmd.compose``). This module keeps the earlier builder — the structure
of the sequential function (``analyze``: the batch inputs, a Megatron-style sharding of its
weights, its layers) written out as per-stage functions called once per microbatch and a
``@main`` that runs them in the chosen pipeline schedule — for one purpose: to rebuild, bit
for bit, the programs of the accuracy studies committed under ``grid_search/results/``
before the switch (their rows record ``program_fingerprint``s of this builder's programs;
``python -m grid_search.study compare`` rebuilds a row with the transform that wrote it,
``--transform tower`` in the search and study commands). New work uses ``dtp``.
See ``docs/transforms.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from distir._util import no_gc
from distir.analysis.replicas import ReplicaProgram
from distir.ir.core import Function, Module
from distir.transforms.compose import MainBuilder
from distir.transforms.placement import (
    distribute,
    gather_results,
    placed_initializers,
    placed_params,
)
from distir.transforms.plan import Analysis, Plan, analyze, as_analysis
from distir.transforms.stages import build_stage_functions

__all__ = ["dtp", "dtp_replica", "analyze"]


def dtp(fn: Function | Module | Analysis, dp: int = 1, tp: int = 1, pp: int = 1,
        microbatches: int = 1, schedule: str = "1f1b", self_contained: bool = False,
        layer_functions: bool = True, batch_inputs: Sequence[str] | None = None,
        hardware: Any = None) -> Function:
    """The sequential step ``fn`` distributed over ``dp·tp·pp`` devices.

    - ``dp`` data-parallel replicas, each with a slice of the batch; gradients are summed
      with ``MPIAllreduce`` before the update.
    - ``tp`` tensor-parallel ranks: projections split in column-/row-parallel pairs with one
      allreduce per pair (per direction), attention split by heads.
    - ``pp`` pipeline stages of equal numbers of layers; each replica's batch is split in
      ``microbatches``, run in the ``"gpipe"`` or ``"1f1b"`` schedule.

    Device ``(d * pp + s) * tp + t`` holds rank ``t`` of stage ``s`` of replica ``d``. The
    default result takes its parameters already placed (weight shards on their devices, the
    batch split over replicas) and is the step proper; with ``self_contained`` it takes the
    sequential parameters on device 0, distributes them first and returns the sequential
    results on device 0 (for differential testing). Layers that repeat are written once as
    layer functions, called once per layer (``layer_functions=False`` writes every layer
    out in its stage function). ``fn`` may also be the result of ``analyze(fn)``, which is
    reused across configurations.

    ``batch_inputs`` names the parameters whose axis 0 is the batch (``input_ids``); by
    default the inputs not bound to initializers are (for a function without initializers,
    the parameters in a data role: a matrix product's left operand, gather indices, a loss's
    target), and the split then flows through every op by the layout rules. ``hardware``
    weighs the ops where pipeline stages are balanced by cost (see ``analyze``).

    Impossible configurations raise ``TransformError`` naming the failed constraint.
    """
    plan = Plan(as_analysis(fn, batch_inputs, hardware, "dtp"), dp, tp, pp, microbatches, schedule)
    return _build(plan, self_contained, layer_functions)


def dtp_replica(fn: Function | Module | Analysis, dp: int = 1, tp: int = 1, pp: int = 1,
                microbatches: int = 1, schedule: str = "1f1b", layer_functions: bool = True,
                batch_inputs: Sequence[str] | None = None, hardware: Any = None,
                fold_tp: bool = True) -> ReplicaProgram:
    """``dtp``'s step for simulation, written for replica 0 alone: the same program as
    ``dtp(fn, dp, ...)`` on devices ``0 .. tp·pp - 1``, each all-reduce of gradients over
    the replicas being replica 0's part of it (``ReplicaAllreduce``). With ``fold_tp``
    (the default), where the ``tp`` ranks of a stage run alike (``Plan.written_tp``), it
    is written for tensor-parallel rank 0 alone too (devices ``s·tp`` of each stage
    ``s``), each collective over the ranks being rank 0's part of it (``PeerAllreduce``,
    ``PeerAllgather``); elsewhere every rank is written (``peers`` is then 1).
    ``distir.simulate`` gives exactly the figures of the program of every replica and
    rank (``distir.analysis.replicas``) at a cost that grows with neither ``dp`` nor
    ``tp``; it cannot be executed or run (there, use ``dtp``). Refuses what ``dtp``
    refuses."""
    plan = Plan(as_analysis(fn, batch_inputs, hardware, "dtp"), dp, tp, pp, microbatches, schedule,
                one_replica=True, one_rank=fold_tp)
    peers = tp // plan.written_tp
    return ReplicaProgram(_build(plan, False, layer_functions), dp, tp * pp, peers)


def _build(plan: Plan, self_contained: bool, layer_functions: bool) -> Function:
    an = plan.an
    with no_gc():
        groups = build_stage_functions(plan, layer_functions)
        mb = MainBuilder(plan, groups)
        origin = None
        if self_contained:
            distribute(mb)
        else:
            origin = placed_params(mb)
        mb.split_microbatches()
        mb.hoist_all()
        mb.run_schedule()
        mb.reduce_gradients()
        mb.updates()
        returns = gather_results(mb) if self_contained else mb.results()
        out = mb.build(an.fn.name, returns)
        if self_contained:  # same parameters: the same bound weights (imported models)
            out.initializers = dict(an.fn.initializers)
        elif origin is not None and an.fn.initializers:  # each placed part of a weight
            out.initializers = placed_initializers(mb, origin, an.fn.initializers)
        mb.release()
        return out
