"""IR-to-IR transforms: data (D), tensor (T) and pipeline (P) parallelism with K
microbatches, and their composition (``dtp``).

The pieces, each usable alone:

- ``analyze``: the structure of a sequential function (``Analysis``): its batch inputs, the
  layout of every value under a Megatron-style sharding (``Sharding``), its layers and the
  class of every op (``Structure``);
- ``Plan``: one configuration applied to an analysis (checks, devices, stages);
- ``Layout`` and ``LAYOUT_RULES``: how values are split, op by op;
- ``stage_order`` / ``ticks``: the GPipe and 1F1B schedules;
- ``dtp``: the configuration as a composition of the spmd passes (``distir.transforms.spmd``:
  layout assignment, stage partitioning, schedule, lowering); ``dtp_replica``: its program
  written for one data-parallel replica (and, where the ranks run alike, one
  tensor-parallel rank), for simulation (``distir.analysis.replicas``);
- ``tower``: the builder ``dtp`` was before the passes (``build_stage_functions``,
  ``MainBuilder``: per-stage functions and ``@main``), kept to rebuild the programs of
  studies measured with it;
- ``grad`` (reverse-mode autodiff by the VJP rules of ``distir.transforms.vjp``) and
  ``training_step`` (a forward program made into a training step): docs/autodiff.md.
"""

from __future__ import annotations

from distir.transforms.compose import MainBuilder
from distir.transforms.dtp import dtp, dtp_replica
from distir.transforms.grad import grad
from distir.transforms.layout import Layout
from distir.transforms.layout_rules import LAYOUT_RULES
from distir.transforms.plan import Analysis, Plan, analyze
from distir.transforms.schedule import SCHEDULES, stage_order, ticks
from distir.transforms.sharding import Sharding
from distir.transforms.stages import build_stage_functions
from distir.transforms.structure import Structure
from distir.transforms.synchronize import synchronize
from distir.transforms.training import training_step

__all__ = ["dtp", "dtp_replica", "analyze", "Analysis", "Plan", "Layout", "LAYOUT_RULES",
           "Sharding", "Structure", "SCHEDULES", "stage_order", "ticks", "build_stage_functions",
           "MainBuilder", "grad", "training_step", "synchronize"]
