"""``dtp``: data, tensor and pipeline parallelism with K microbatches, composed of passes.

``dtp(fn, dp, tp, pp, microbatches, schedule)`` is the composition of the spmd passes
(``distir.transforms.spmd``; docs/spmd.md): seeds from the model's analysis (``analyze``:
its batch inputs, the Megatron-style pairs and attention heads its weights are split by),
a *layout assignment* propagated over the ``(dp·K, tp)`` mesh, *stage partitioning* by
simulated cost, the GPipe or 1F1B *schedule*, and their *lowering* to a verified program of
``dp·tp·pp`` devices (equal units of the schedule as calls of one stage function, equal
layers as calls of one layer function). Each pass returns something that prints and checks
on its own (``distir.transforms.spmd.plan_dtp(...).dumps()``).

The builder this replaced is kept as ``distir.transforms.tower`` to rebuild the programs of
studies measured before the switch. See ``docs/transforms.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from distir.analysis.replicas import ReplicaProgram
from distir.ir.core import Function, Module
from distir.transforms.plan import Analysis, analyze, as_analysis

__all__ = ["dtp", "dtp_replica", "analyze"]


def dtp(fn: Function | Module | Analysis, dp: int = 1, tp: int = 1, pp: int = 1,
        microbatches: int = 1, schedule: str = "1f1b", self_contained: bool = False,
        layer_functions: bool = True, batch_inputs: Sequence[str] | None = None,
        hardware: Any = None) -> Function:
    """The sequential step ``fn`` distributed over ``dp·tp·pp`` devices.

    - ``dp`` data-parallel replicas, each with a slice of the batch; each gradient is summed
      over them by an ``MPIAllreduce`` issued as soon as it is complete (overlapping the
      rest of the backward pass), before the update.
    - ``tp`` tensor-parallel ranks: projections split in column-/row-parallel pairs with one
      all-reduce per pair (per direction), attention split by heads, vocabulary-parallel
      embeddings and cross entropy; whatever has no split layout is replicated.
    - ``pp`` pipeline stages cut by simulated cost (``hardware``, default ``h100-sxm``),
      repeated layers kept whole; each replica's batch is split in ``microbatches``, run in
      the ``"gpipe"`` or ``"1f1b"`` schedule.

    Device ``(d * pp + s) * tp + t`` holds rank ``t`` of stage ``s`` of replica ``d``. The
    default result takes its parameters already placed: ``{name}_d{device}`` for each
    device of each stage that reads parameter ``name`` (a weight's piece, a batch input's
    slice of the replica), and an imported model's bound weights cut into those pieces;
    it returns every device's piece of every result. With ``self_contained`` it takes the
    sequential parameters on device 0, distributes them first and returns the sequential
    results on device 0 (for differential testing). ``layer_functions=False`` writes
    every unit and layer out in ``@main`` instead of calling stage and layer functions.
    ``fn`` may also be the result of ``analyze(fn)``, reused across configurations.

    ``batch_inputs`` names the parameters whose axis 0 is the batch (``input_ids``); by
    default the inputs not bound to initializers are (for a function without initializers,
    the parameters in a data role: a matrix product's left operand, gather indices, a loss's
    target), and the split then flows through every op by the layout rules.

    Impossible configurations raise ``TransformError`` naming the failed constraint.
    """
    from distir.transforms.spmd.compose import compose_dtp

    return compose_dtp(as_analysis(fn, batch_inputs, hardware, "dtp"), dp, tp, pp, microbatches,
                       schedule, self_contained=self_contained,
                       stage_functions=layer_functions)


def dtp_replica(fn: Function | Module | Analysis, dp: int = 1, tp: int = 1, pp: int = 1,
                microbatches: int = 1, schedule: str = "1f1b", layer_functions: bool = True,
                batch_inputs: Sequence[str] | None = None, hardware: Any = None,
                fold_tp: bool = True) -> ReplicaProgram:
    """``dtp``'s step for simulation, written for replica 0 alone: the same program as
    ``dtp(fn, dp, ...)`` on devices ``0 .. tp·pp - 1``, each sum of gradients over the
    replicas being replica 0's part of it (``ReplicaAllreduce``), and each gather over
    them (an activation split on the batch that an op reads whole, as where a reshape
    merges the batch with a dimension split over the ranks) too (``ReplicaAllgather``);
    where a collective over the replicas has neither form (a reduce-scatter), the program
    of every replica (``replicas`` is then 1). With ``fold_tp`` (the
    default), where the ``tp`` ranks of every stage run alike (no bias added on rank 0
    alone), it is written for tensor-parallel rank 0 alone too (devices ``s·tp`` of each
    stage ``s``), each collective over the ranks being rank 0's part of it
    (``PeerAllreduce``, ``PeerAllgather``); elsewhere every rank is written (``peers`` is
    then 1). ``distir.simulate`` gives exactly the figures of the program of every replica
    and rank (``distir.analysis.replicas``) at a cost that grows with neither ``dp`` nor
    ``tp``; it cannot be executed or run (there, use ``dtp``). Refuses what ``dtp``
    refuses."""
    from distir.transforms.spmd.compose import plan_dtp

    plan = plan_dtp(as_analysis(fn, batch_inputs, hardware, "dtp"), dp, tp, pp, microbatches,
                    schedule)
    return plan.lower_replica(layer_functions, fold_tp=fold_tp and tp > 1)

