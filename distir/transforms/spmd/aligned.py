"""Lookups whose known indices stay in each device's block of a split table.

A ``Gather(data, indices)`` along an axis that a mesh axis splits reads every row of that
axis in general (``rules`` then gathers the data), and so does a ``GatherND`` whose index
tuples address a split axis (component ``c`` of the indices' last axis addresses data
dimension ``batch_dims + c``). But where the indices are known before running (a shape
chain: positions made from ``Range`` over the sizes) and a cut of them in as many blocks
along one of their (position) dimensions sends block ``j`` into rows ``[j·L, (j+1)·L)`` of
the split dimension (``L`` rows per device), the lookup runs locally: device ``j`` looks up
its block of the indices, shifted by its first row, in its own rows, and holds block ``j``
of the result. A ``ScatterND`` so aligned (its updates cut as its indices) writes into
its own rows likewise and holds its block of the data: the gradient of such a lookup, as
that of the dynamo exporter's ``as_strided`` view (a ``Gather`` from a flattened batch,
``nn.AdaptiveAvgPool1d``), scattered into zeros split by the batch. ``transformers``'
attention mask is such a lookup on a batch split, read at
positions ``b·S + s`` of the flattened ``(B·S, 1)`` mask (``Gather(Flatten(mask),
positions)``, torch's torchscript exporter) or at index pairs ``(b, s)`` of the ``(B, S)``
mask (``GatherND(mask, pairs)``, its dynamo exporter): with it, the mask and every op
reading it stay split by the batch (per microbatch in a pipeline), as ``dtp`` keeps them
(``Sharding._pull_batch``, which reaches the same split by recomputing the positions from
the local batch size).

The indices are ``Program.known``'s: kept by the type propagator, or computed once from
the constants and shapes they are made of where they are too many to be kept (a mask over
more than ``CONCRETE_LIMIT`` positions), up to ``KNOWN_LIMIT`` elements; the ops making
them are then left out of the lowered programs (``index_only``).

``aligned_dim`` is the rule's test (``rules`` asks for the indices split so, and gives the
result split along ``result_dim``); ``local_indices`` is what both lowerings (``lower``,
``lower_pipeline``) give a device's lookup instead of the indices' piece: its block,
shifted to its rows, as a constant.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from distir.ir.core import Op
from distir.transforms.program import Program, in_own_blocks
from distir.transforms.spmd.mesh import Mesh, Placement, Shard, Spec

__all__ = ["LOOKUPS", "aligned_dim", "aligned_axis", "result_dim", "local_indices",
           "index_only"]

LOOKUPS = frozenset({"Gather", "GatherND", "ScatterND"})
"""The lookups the rule applies to (a scatter writes where the same lookup would read)."""


def _addressed(prog: Program, op: Op) -> range:
    """The dimensions of ``op``'s data that its indices address (``Gather``: ``axis``;
    ``GatherND``, ``ScatterND``: ``batch_dims`` to ``batch_dims`` + the index tuples'
    length)."""
    rank = len(prog.shape(op.inputs[0]))  # type: ignore[arg-type]
    if op.op_type == "Gather":
        a = int(prog.attrs(op).get("axis", 0) or 0) % max(rank, 1)
        return range(a, a + 1)
    idx = prog.shape(op.inputs[1])  # type: ignore[arg-type]
    bd = int(prog.attrs(op).get("batch_dims", 0) or 0)
    return range(bd, bd + (int(idx[-1]) if idx else 0))


def _positions(prog: Program, op: Op) -> range:
    """The dimensions of ``op``'s indices along which they may be cut: all of a
    ``Gather``'s; a ``GatherND``'s or ``ScatterND``'s but its batch dimensions and its
    index tuples' axis (a scatter's updates are cut alike)."""
    rank = len(prog.shape(op.inputs[1]))  # type: ignore[arg-type]
    if op.op_type == "Gather":
        return range(rank)
    return range(int(prog.attrs(op).get("batch_dims", 0) or 0), rank - 1)


def _known_rows(prog: Program, op: Op, dim: int) -> np.ndarray | None:
    """The rows of ``op``'s data dimension ``dim`` (one it addresses) that its indices,
    known before running (``Program.known``: computed once where the type propagator did
    not keep them), read, with negative ones made positive: the indices themselves for a
    ``Gather``, their component addressing ``dim`` for a ``GatherND``."""
    idx = prog.known(op.inputs[1])
    if idx is None or idx.dtype.kind not in "iu" or idx.size == 0:
        return None
    if op.op_type != "Gather":
        idx = idx[..., dim - _addressed(prog, op).start]
    rows = prog.shape(op.inputs[0])[dim]  # type: ignore[arg-type]
    return np.where(idx < 0, idx + rows, idx)


def _split_data_dim(prog: Program, op: Op, data: Placement | None) -> int | None:
    """The data dimension ``data`` splits, where ``op`` is a lookup that addresses it and
    ``data`` is a ``Shard`` of one group; else ``None``."""
    if op.op_type not in LOOKUPS or not isinstance(data, Shard) or data.groups != 1 or \
            op.inputs[0] is None or op.inputs[1] is None:
        return None
    return data.dim if data.dim in _addressed(prog, op) else None


def aligned_dim(prog: Program, op: Op, data: Placement | None, n: int) -> int | None:
    """The dimension of ``op``'s known indices whose cut in ``n`` blocks sends block ``j``
    into block ``j`` of the data's rows, where ``op`` is a lookup (``LOOKUPS``) whose data
    is placed ``data`` (``Shard`` of one group along a dimension the indices address,
    ``n`` devices) on one mesh axis; else ``None``."""
    dim = _split_data_dim(prog, op, data)
    if dim is None:
        return None
    rows = prog.shape(op.inputs[0])[dim]  # type: ignore[arg-type]
    idx = _known_rows(prog, op, dim)
    if idx is None:
        return None
    for k in _positions(prog, op):
        if in_own_blocks(np.moveaxis(idx, k, 0), rows, n):
            return k
    return None


def result_dim(prog: Program, op: Op, k: int) -> int:
    """The dimension of ``op``'s result along which a cut of its indices along ``k`` cuts
    it (``Gather``: ``axis + k``; ``GatherND``: ``k``; not for ``ScatterND``, whose result
    is split as its data)."""
    assert op.op_type != "ScatterND"
    return _addressed(prog, op).start + k if op.op_type == "Gather" else k


def _aligned_axes(prog: Program, op: Op, reads: tuple[Spec | None, ...]) -> list[int]:
    if op.op_type not in LOOKUPS or len(reads) < 2 or reads[0] is None or reads[1] is None:
        return []
    return [a for a, (p, q) in enumerate(zip(reads[0], reads[1], strict=True))
            if _split_data_dim(prog, op, p) is not None and isinstance(q, Shard)]


def aligned_axis(prog: Program, op: Op, reads: tuple[Spec | None, ...]) -> int | None:
    """The (first) mesh axis on which ``op`` (reading ``reads``, accepted by the rules) is
    a lookup of aligned indices (its data split along a dimension the indices address,
    its indices split), else ``None``."""
    axes = _aligned_axes(prog, op, reads)
    return axes[0] if axes else None


def local_indices(prog: Program, op: Op, reads: tuple[Spec | None, ...], mesh: Mesh,
                  coords: tuple[int, ...]) -> np.ndarray:
    """The indices the device at ``coords`` looks up with (``op`` aligned on a mesh axis,
    ``aligned_axis``): its block of the known indices (on every mesh axis that splits
    them), less, on every aligned axis, the first of its rows of the data dimension that
    axis splits (in the component addressing it, for a ``GatherND``)."""
    axes = _aligned_axes(prog, op, reads)
    assert axes
    idx = prog.known(op.inputs[1])
    assert idx is not None
    idx = np.array(idx, dtype=np.int64)
    shape = prog.shape(op.inputs[0])  # type: ignore[arg-type]
    nd = op.op_type != "Gather"
    for a in axes:
        p = reads[0][a]  # type: ignore[index]
        assert isinstance(p, Shard)
        c = p.dim - _addressed(prog, op).start
        rows = _known_rows(prog, op, p.dim)
        assert rows is not None
        rows = rows - coords[a] * (shape[p.dim] // mesh.shape[a])
        if nd:
            idx[..., c] = rows
        else:
            idx = rows
    spec = reads[1]
    assert spec is not None
    for ax, q in enumerate(spec):
        if isinstance(q, Shard):
            idx = np.split(idx, mesh.shape[ax], axis=q.dim)[coords[ax]]
    dt: Any = prog.type(op.inputs[1]).dtype.np  # type: ignore[arg-type]
    return np.ascontiguousarray(idx, dtype=dt)


def index_only(prog: Program, reads_of: Callable[[int], tuple[Spec | None, ...] | None],
               ) -> frozenset[int]:
    """The live ops of ``prog`` whose results are read only as the indices of aligned
    lookups (op ``i`` reads ``reads_of(i)``), directly or through other such ops: the
    lowerings give those lookups constants (``local_indices``) and leave these ops out
    (positions too many for the type propagator to keep are otherwise computed on every
    device for nothing)."""
    skip = frozenset((i, 1) for i in prog.live_ops if prog.ops[i].op_type in LOOKUPS and
                     aligned_axis(prog, prog.ops[i], reads_of(i) or ()) is not None)
    if not skip:
        return frozenset()
    live, _ = prog.live(skip)
    return frozenset(i for i in prog.live_ops if not live[i])
