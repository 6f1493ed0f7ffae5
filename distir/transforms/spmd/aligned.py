"""Lookups whose known indices stay in each device's block of a split table.

A ``Gather(data, indices)`` along an axis that a mesh axis splits reads every row of that
axis in general (``rules`` then gathers the data). But where the indices are known before
running (a shape chain: positions made from ``Range`` over the sizes) and a cut of them in
as many blocks along one of their dimensions sends block ``j`` into rows
``[j·L, (j+1)·L)`` of the data (``L`` rows per device), the lookup runs locally: device
``j`` gathers its block of the indices, shifted by its first row, from its own rows, and
holds block ``j`` of the result. ``transformers``' attention mask read at positions
``b·S + s`` of the flattened ``(B·S, 1)`` mask (``Gather(Flatten(mask), positions)``) is
such a lookup on a batch split: with it, the mask and every op reading it stay split by
the batch (per microbatch in a pipeline), as ``dtp`` keeps them (``Sharding._pull_batch``,
which reaches the same split by recomputing the positions from the local batch size).

The indices are ``Program.known``'s: kept by the type propagator, or computed once from
the constants and shapes they are made of where they are too many to be kept (a mask over
more than ``CONCRETE_LIMIT`` positions), up to ``KNOWN_LIMIT`` elements; the ops making
them are then left out of the lowered programs (``index_only``).

``aligned_dim`` is the rule's test (``rules`` asks for the indices split so, and gives the
result split along the indices' dimension); ``local_indices`` is what both lowerings
(``lower``, ``lower_pipeline``) give a device's lookup instead of the indices' piece: its
block, shifted to its rows, as a constant.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from distir.ir.core import Op, Value
from distir.transforms.program import SHAPE_OPERANDS, SHAPE_OPS, Program
from distir.transforms.spmd.mesh import Mesh, Placement, Shard, Spec

__all__ = ["aligned_dim", "aligned_axis", "local_indices", "index_only"]


def _known_indices(prog: Program, op: Op, rows: int) -> np.ndarray | None:
    """``op``'s indices, known before running (``Program.known``: computed once where the
    type propagator did not keep them), with negative ones made positive."""
    idx = prog.known(op.inputs[1])
    if idx is None:
        return None
    if idx.dtype.kind not in "iu" or idx.size == 0:
        return None
    return np.where(idx < 0, idx + rows, idx)


def _gather_axis(prog: Program, op: Op) -> int:
    rank = len(prog.shape(op.inputs[0]))  # type: ignore[arg-type]
    return int(prog.attrs(op).get("axis", 0) or 0) % max(rank, 1)


def aligned_dim(prog: Program, op: Op, data: Placement | None, n: int) -> int | None:
    """The dimension of ``op``'s known indices whose cut in ``n`` blocks sends block ``j``
    into block ``j`` of the data's rows, where ``op`` is a ``Gather`` whose data is placed
    ``data`` (``Shard`` of one group along the gathered axis, ``n`` devices) on one mesh
    axis; else ``None``."""
    if op.op_type != "Gather" or not isinstance(data, Shard) or data.groups != 1 or \
            op.inputs[0] is None or op.inputs[1] is None:
        return None
    axis = _gather_axis(prog, op)
    if data.dim != axis:
        return None
    rows = prog.shape(op.inputs[0])[axis]
    idx = _known_indices(prog, op, rows)
    if idx is None or rows % n:
        return None
    per = rows // n
    for k, size in enumerate(idx.shape):
        if size % n:
            continue
        block = np.moveaxis(idx, k, 0).reshape(n, -1)
        first = np.arange(n, dtype=np.int64)[:, None] * per
        if ((block >= first) & (block < first + per)).all():
            return k
    return None


def aligned_axis(prog: Program, op: Op, reads: tuple[Spec | None, ...]) -> int | None:
    """The mesh axis on which ``op`` (reading ``reads``, accepted by the rules) is a lookup
    of aligned indices (its data split along the gathered axis, its indices split), else
    ``None``."""
    if op.op_type != "Gather" or not reads or reads[0] is None or reads[1] is None:
        return None
    axis = _gather_axis(prog, op)
    for a, (p, q) in enumerate(zip(reads[0], reads[1], strict=True)):
        if isinstance(p, Shard) and p.dim == axis and isinstance(q, Shard):
            return a
    return None


def local_indices(prog: Program, op: Op, reads: tuple[Spec | None, ...], mesh: Mesh,
                  coords: tuple[int, ...]) -> np.ndarray:
    """The indices the device at ``coords`` looks up with (``op`` aligned on a mesh axis,
    ``aligned_axis``): its block of the known indices (on every mesh axis that splits
    them), less the first of its rows on the aligned axis."""
    a = aligned_axis(prog, op, reads)
    assert a is not None
    rows = prog.shape(op.inputs[0])[_gather_axis(prog, op)]  # type: ignore[arg-type]
    idx = _known_indices(prog, op, rows)
    assert idx is not None
    spec = reads[1]
    assert spec is not None
    for ax, p in enumerate(spec):
        if isinstance(p, Shard):
            idx = np.split(idx, mesh.shape[ax], axis=p.dim)[coords[ax]]
    first = coords[a] * (rows // mesh.shape[a])
    dt: Any = prog.type(op.inputs[1]).dtype.np  # type: ignore[arg-type]
    return np.ascontiguousarray(idx - first, dtype=dt)


def index_only(prog: Program, reads_of: Callable[[int], tuple[Spec | None, ...] | None],
               ) -> frozenset[int]:
    """The live ops of ``prog`` whose results are read only as the indices of aligned
    lookups (op ``i`` reads ``reads_of(i)``), directly or through other such ops: the
    lowerings give those lookups constants (``local_indices``) and leave these ops out
    (positions too many for the type propagator to keep are otherwise computed on every
    device for nothing)."""
    skip = {i for i in prog.live_ops if prog.ops[i].op_type == "Gather" and
            aligned_axis(prog, prog.ops[i], reads_of(i) or ()) is not None}
    if not skip:
        return frozenset()
    read: set[Value] = set(prog.fn.returns)
    out: set[int] = set()
    for i in reversed(prog.live_ops):
        op = prog.ops[i]
        if not any(o in read for o in op.outputs):
            out.add(i)
            continue
        if op.op_type in SHAPE_OPS:
            continue
        for k, v in enumerate(op.inputs):
            if v is not None and (op.op_type, k) not in SHAPE_OPERANDS and \
                    not (k == 1 and i in skip):
                read.add(v)
    return frozenset(out)
