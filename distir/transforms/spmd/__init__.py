"""SPMD layouts on a device mesh: placements, their propagation, their lowering.

The foundation of per-op parallelisation (issue 19) and of ``dtp`` as a composition of
passes (issue 16, part 6). Each pass returns something that can be printed and tested on
its own:

- ``propagate(fn, mesh, seeds)`` -> ``LayoutAssignment`` (``dumps()``, ``check()``);
- ``lower(assignment, self_contained=False)`` -> a verified ``Function``;
- ``communicated_elements(fn)``: elements sent per step by a lowered program;
- ``search_small(fn, mesh)``: an exhaustive search over per-op placements for small
  programs (the seed of issue 19's search);
- ``optimize(fn, devices)``: the search at scale (segments, a cache per structure);
- ``partition_stages(fn, pp)`` -> ``StagePartition``, ``schedule(stages, K, kind)`` ->
  ``Schedule``, ``lower_pipeline(assignment, stages, schedule)`` -> a verified
  ``Function``: pipeline stages and microbatches; ``compose_dtp(fn, dp, tp, pp, K)``:
  ``dtp``'s configurations as the composition of these passes.

See ``docs/spmd.md``.
"""

from __future__ import annotations

from distir.transforms.spmd.assignment import LayoutAssignment, Redistribution
from distir.transforms.spmd.compose import Composed, compose_dtp, compose_dtp_replica, plan_dtp
from distir.transforms.spmd.cost import comm_breakdown, communicated_elements
from distir.transforms.spmd.lower import lower
from distir.transforms.spmd.mapping import OptimizeResult, optimize
from distir.transforms.spmd.mesh import (
    Mesh,
    P,
    Partial,
    Placement,
    R,
    Replicate,
    Shard,
    Spec,
    local_shape,
)
from distir.transforms.spmd.pipeline import Schedule, lower_pipeline, schedule, stage_meshes
from distir.transforms.spmd.propagate import propagate
from distir.transforms.spmd.search import SearchResult, search_small
from distir.transforms.spmd.stages import StagePartition, partition_stages

__all__ = ["Mesh", "Shard", "Replicate", "Partial", "Placement", "Spec", "R", "P",
           "local_shape", "LayoutAssignment", "Redistribution", "propagate", "lower",
           "communicated_elements", "comm_breakdown", "search_small", "SearchResult",
           "optimize", "OptimizeResult", "partition_stages", "StagePartition", "schedule",
           "Schedule", "lower_pipeline", "stage_meshes", "compose_dtp", "plan_dtp", "Composed",
           "compose_dtp_replica"]
