"""How a data-parallel step synchronises its gradients: ``synchronize(fn, strategy)``.

A data-parallel program (``dtp(step, dp=D)``) sums each gradient over its ``D`` replicas with
one ``MPIAllreduce`` right after the op that completes it, then every replica runs the same
optimizer update. ``synchronize`` rewrites those all-reduces by a *strategy*, a JSON-able
dict (docs/synchronization.md):

- a builder by name: ``{"builder": "per-gradient" | "ddp" | "merge-all" | "chunk" | "ps" |
  "ps-lb" | "partitioned-ps" | "hierarchical" | "zero-1" | "zero-2" | "powersgd", ...}``
  (options ``bucket_bytes``, ``first_bucket_bytes``, ``k``, ``device``, ``shards``,
  ``node_size``, ``rank``, ``compress``);
- a bucket size: ``{"bucket_bytes": N}`` (greedy buckets in gradient-readiness order);
- one entry per gradient: ``{"variables": [{"sync": "allreduce", "group": g}, {"sync":
  "ps", "device": d, "shards": n, "axis": a}, {"sync": "zero", "stage": 1 | 2}, {"sync":
  "hierarchical", "node_size": k}, {"sync": "powersgd", "rank": r}, ...]}``, each but
  PowerSGD optionally with ``"compress": "fp16" | "bf16"``.

Gradients are found structurally, never by name: an ``MPIAllreduce`` of the entry function's
top level whose every result is read only by optimizer ops (``OPTIMIZERS``) as their
gradient (input 1), one per replica, once the calls hiding a gradient's all-reduce or its
updates are written out (``with_updates_inlined``: the tower's ``@update``, the spmd
passes' layer and stage functions). They are numbered in *readiness order*: the order of
their all-reduces in the program, which is the order the backward pass completes them.

Invariants of the result (the differential tests check them with the reference executor):
the same parameters and results as ``fn``; the updated weights equal ``fn``'s (exactly for
all-reduce buckets, PS and ZeRO up to the order of float sums; within 16-bit precision with
compression) provided, as data parallelism keeps them, every replica holds the same weights
and optimizer state. An all-reduce group becomes one ``MPIAllreduceBucket`` issued where its
last member's all-reduce was (when that gradient is ready); PS reduces to the server
(``MPIReduce``), updates there and broadcasts every optimizer result; ZeRO-2 reduce-scatters
the gradient along axis 0, updates each replica's shard and all-gathers the results
(ZeRO-1 all-reduces the gradient and updates the shard of it). A partitioned PS splits the
gradient into shards along an axis, each reduced to and updated on its own server; the
hierarchical all-reduce reduces within each node, all-reduces across nodes and broadcasts
within; PowerSGD (lossy) appends its state to the program's parameters and results
(``distir.transforms.sync.powersgd``).

The parts live in ``distir.transforms.sync`` (``plan``: gradients, strategies and checks;
``rewrite``; ``powersgd``); this module is their public face.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from distir.errors import TransformError
from distir.ir.core import Function, Module
from distir.transforms.sync.plan import (
    BUILDERS,
    DDP_BUCKET_BYTES,
    DDP_FIRST_BUCKET_BYTES,
    OPTIMIZERS,
    Gradient,
    VarSync,
    dumps_strategy,
    gradients,
    resolve,
    servers,
    split_groups,
    with_updates_inlined,
)
from distir.transforms.sync.powersgd import state_names
from distir.transforms.sync.rewrite import Rewrite

__all__ = ["OPTIMIZERS", "BUILDERS", "Gradient", "VarSync", "gradients", "resolve",
           "synchronize", "dumps_strategy", "servers", "split_groups", "state_names",
           "DDP_BUCKET_BYTES", "DDP_FIRST_BUCKET_BYTES", "with_updates_inlined"]


def synchronize(fn: Function | Module, strategy: Mapping[str, Any] | Sequence[VarSync],
                ) -> Function:
    """``fn`` (a data-parallel training step) with its gradients synchronised by
    ``strategy``: a strategy dict (module docstring) or a resolved plan, one ``VarSync``
    per gradient in readiness order. Raises ``TransformError`` for a strategy that does
    not fit the program."""
    f = with_updates_inlined(fn.entry if isinstance(fn, Module) else fn)
    grads = gradients(f)
    if isinstance(strategy, Mapping):
        plan = resolve(grads, strategy)
    else:
        plan = tuple(strategy)
        if len(plan) != len(grads) or not all(isinstance(p, VarSync) for p in plan):
            raise TransformError(f"a plan lists one VarSync per gradient ({len(grads)} "
                                 "here), in readiness order")
        plan = split_groups(grads, plan)
    return Rewrite(f, grads, plan).run()
