"""Vocabulary-parallel ops on one mesh axis: a lookup in a table split by rows, the
gradient scattered into such rows, and the cross entropy of class-split logits.

The layout rules accept these splits for ``dtp`` (``layout_shape_rules.gather``,
``layout_index_rules._scatter_nd``, ``layout_rules._xent``; ``vocab_parallel`` writes
``dtp``'s ranks); ``rules`` accepts them on a mesh axis where ``accepts`` says so, and both
lowerings (``lower``, ``lower_pipeline``) write such an op with ``write_vocab``: the same
local ops as ``vocab_parallel``, each device at its coordinate along the axis that splits
input 0 (``vocab_axis``), the collectives over that axis's groups. On that axis:

- ``Gather(table, ids)`` of a table ``Shard(axis)`` with ids whole: each device shifts the
  ids to its rows, looks up row 0 for ids outside them and zeroes those; ``Partial``.
- ``ScatterND(zeros, ids, updates, reduction="add")`` into rows ``Shard(0)`` (the
  gradient of such a table) with ids and updates whole: each device adds the updates
  whose id falls in its rows; ``Shard(0)``, no communication.
- ``SoftmaxCrossEntropyLoss(logits, labels)`` with logits ``Shard(-1)`` and labels whole:
  the row maxima all-gathered (``(..., 1)`` per device) and their maximum ``M``, the sum of
  ``exp(z - M)`` all-reduced, the label's logit picked where it lives and all-reduced; the
  loss whole (``Replicate``) on that axis. Its gradient ``softmax - onehot`` is local on
  the class split (the same ``M`` and sums), ``Shard(-1)``.

Ids and labels are taken to be in ``[0, rows)``, as ``dtp`` takes them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, Protocol

import numpy as np

from distir.ir.builder import FunctionBuilder
from distir.ir.core import Op, Value
from distir.transforms.program import Program
from distir.transforms.spmd.mesh import Mesh, Placement, Replicate, Shard, Spec, local_shape
from distir.transforms.vocab_parallel import VOCAB_OPS

__all__ = ["accepts", "vocab_axis", "write_vocab"]

_XENT = frozenset({"SoftmaxCrossEntropyLoss", "SoftmaxCrossEntropyLossGrad"})


def _vocab_dim(op_type: str, shape0: tuple[int, ...], attrs: dict[str, Any]) -> int:
    """The axis of input 0 that a vocabulary-parallel ``op_type`` splits."""
    if op_type == "Gather":
        return int(attrs.get("axis", 0) or 0) % max(len(shape0), 1)
    return 0 if op_type == "ScatterND" else len(shape0) - 1


def accepts(op_type: str, pl: list[Placement | None], shapes: tuple,
            attrs: dict[str, Any]) -> bool:
    """Whether ``op_type`` may run vocabulary-parallel on a mesh axis where its inputs are
    placed ``pl``: input 0 ``Shard`` (one group) along its vocabulary axis, the others
    whole. (The layout rule then decides, as for ``dtp``.)"""
    if op_type not in VOCAB_OPS or not pl or not isinstance(pl[0], Shard) or \
            pl[0].groups != 1 or shapes[0] is None:
        return False
    if pl[0].dim != _vocab_dim(op_type, shapes[0], attrs):
        return False
    if not all(isinstance(p, Replicate) for p in pl[1:]):
        return False
    if op_type == "ScatterND":
        return attrs.get("reduction") == "add" and bool(shapes[1]) and shapes[1][-1] == 1
    if op_type in _XENT:
        return attrs.get("reduction", "sum") in ("sum", "mean")
    return True


def vocab_axis(prog: Program, op: Op, reads: tuple[Spec | None, ...]) -> int | None:
    """The mesh axis on which ``op``, reading ``reads`` (accepted by the rules), runs
    vocabulary-parallel (its other inputs whole on it), else ``None``."""
    if op.op_type not in VOCAB_OPS or not reads or reads[0] is None or op.inputs[0] is None:
        return None
    dim = _vocab_dim(op.op_type, prog.shape(op.inputs[0]), prog.attrs(op))
    for a, p in enumerate(reads[0]):
        if isinstance(p, Shard) and p.dim == dim and all(
                s is None or isinstance(s[a], Replicate) for s in reads[1:]):
            return a
    return None


class Const(Protocol):
    """``const(array, device, hint, apart)``: a constant on a device (the lowering's,
    shared by value); one with a key ``apart`` is shared only with constants of that key,
    so that each device's own constant of a group (its first row, its class ids), keyed
    by the group's constants, is never one that every device holds (0, the row count):
    every device of the group holds as many constants (``pipeline.ranks_alike``)."""

    def __call__(self, arr: np.ndarray, device: int, hint: str,
                 apart: Hashable = None) -> Value:
        ...


class _Devices:
    """Appends one op per rank of ``ranks`` (indices into ``mesh``, whole groups of
    ``axis``); lists of values are indexed by mesh rank."""

    def __init__(self, b: FunctionBuilder, mesh: Mesh, axis: int, ranks: list[int],
                 device: Callable[[int], int], const: Const, base: str) -> None:
        self.b, self.mesh, self.axis, self.ranks = b, mesh, axis, ranks
        self.written = set(ranks)
        self.device, self._const, self.base = device, const, base

    def coord(self, r: int) -> int:
        return self.mesh.coords[r][self.axis]

    def op(self, op_type: str, ins: list[list[Any]], attrs: dict | None = None,
           hint: str = "", names: list[str] | None = None) -> list[Any]:
        out: list[Any] = [None] * self.mesh.size
        for r in self.ranks:
            name = names[r] if names is not None else \
                f"{self.base}_{hint or op_type.lower()}_d{self.device(r)}"
            out[r] = self.b.op(op_type, *(x[r] for x in ins), name=name, **(attrs or {}))
        return out

    def collective(self, op_type: str, ins: list[Any], hint: str, **attrs: int) -> list[Any]:
        out = list(ins)
        if self.mesh.shape[self.axis] == 1:
            return out
        for g in self.mesh.groups(self.axis):
            if g[0] not in self.written:
                continue
            if g[1] not in self.written:  # rank 0 of the group alone (``fold_tp``): its part
                peer = "PeerAllreduce" if op_type == "MPIAllreduce" else "PeerAllgather"
                out[g[0]] = self.b.op(peer, ins[g[0]], peers=len(g),
                                      name=f"{self.base}_{hint}_d{self.device(g[0])}",
                                      **attrs)
                continue
            res = self.b.op(op_type, *(ins[r] for r in g), num_results=len(g),
                            name=[f"{self.base}_{hint}_d{self.device(r)}" for r in g], **attrs)
            for r, v in zip(g, res, strict=True):
                out[r] = v
        return out

    def const(self, arr: Callable[[int], np.ndarray], hint: str) -> list[Any]:
        """Rank ``r``'s constant ``arr(coordinate of r)``, kept apart from equal constants
        (``Const``)."""
        every = np.stack([arr(c) for c in range(self.mesh.shape[self.axis])])
        apart = (every.dtype.str, every.shape, every.tobytes())
        out: list[Any] = [None] * self.mesh.size
        for r in self.ranks:
            out[r] = self._const(every[self.coord(r), ...], self.device(r), f"{self.base}.{hint}",
                                 apart)
        return out

    def same(self, arr: np.ndarray, hint: str) -> list[Any]:
        """The constant ``arr`` on every rank."""
        out: list[Any] = [None] * self.mesh.size
        for r in self.ranks:
            out[r] = self._const(arr, self.device(r), f"{self.base}.{hint}")
        return out


def write_vocab(b: FunctionBuilder, prog: Program, mesh: Mesh, op: Op,
                reads: tuple[Spec | None, ...], ins: list[list[Any]], ranks: list[int],
                device: Callable[[int], int], const: Const, names: list[str]) -> list[Any]:
    """The local ops of the vocabulary-parallel ``op`` on the ranks ``ranks`` of ``mesh``
    (``ins``: its local inputs, one list per input indexed by mesh rank); returns its
    local result per rank (named ``names[r]``)."""
    axis = vocab_axis(prog, op, reads)
    assert axis is not None
    base = op.outputs[0].name if op.outputs[0].name not in (None, "", "_") else "v"
    d = _Devices(b, mesh, axis, ranks, device, const, base)
    shapes = [None if v is None or s is None else local_shape(prog.shape(v), s, mesh)
              for v, s in zip(op.inputs, reads, strict=True)]
    if op.op_type == "Gather":
        return _gather(d, prog, op, shapes, ins, names)
    if op.op_type == "ScatterND":
        return _scatter(d, prog, op, shapes, ins, names)
    return _xent(d, prog, op, shapes, ins, names)


def _in_range(d: _Devices, ids: list[Any], dtype: np.dtype, n: int,
              ) -> tuple[list[Any], list[Any]]:
    """``(local ids, in range)``: the ids shifted to each device's ``n`` rows (0 outside
    them), and whether they fall in them."""
    rel = d.op("Sub", [ids, d.const(lambda c: np.array(c * n, dtype), "first")], hint="ids_rel")
    zero = d.same(np.array(0, dtype), "zero_id")
    ok = d.op("And", [d.op("GreaterOrEqual", [rel, zero]),
                      d.op("Less", [rel, d.same(np.array(n, dtype), "rows")])], hint="ids_in")
    return d.op("Where", [ok, rel, zero], hint="ids_local"), ok


def _masked(d: _Devices, ok: list[Any], shape: tuple[int, ...], got: list[Any],
            dtype: np.dtype, names: list[str] | None = None) -> list[Any]:
    """``got`` where ``ok`` (reshaped to ``shape``), zeros elsewhere."""
    mask = d.op("Reshape", [ok, d.same(np.array(shape, np.int64), "mask_shape")], hint="mask")
    return d.op("Where", [mask, got, d.same(np.array(0, dtype), "zero")], hint="masked",
                names=names)


def _gather(d: _Devices, prog: Program, op: Op, shapes: list, ins: list,
            names: list[str]) -> list[Any]:
    data, idx = op.inputs
    assert data is not None and idx is not None
    sd, si = shapes[0], shapes[1]
    axis = _vocab_dim("Gather", sd, prog.attrs(op))
    li, ok = _in_range(d, ins[1], prog.type(idx).dtype.np, sd[axis])
    got = d.op("Gather", [ins[0], li], {"axis": axis})
    shape = (1,) * axis + tuple(si) + (1,) * (len(sd) - axis - 1)
    return _masked(d, ok, shape, got, prog.type(data).dtype.np, names)


def _scatter(d: _Devices, prog: Program, op: Op, shapes: list, ins: list,
             names: list[str]) -> list[Any]:
    idx, upd = op.inputs[1], op.inputs[2]
    assert idx is not None and upd is not None
    sd, si = shapes[0], shapes[1]
    li, ok = _in_range(d, ins[1], prog.type(idx).dtype.np, sd[0])
    kept = _masked(d, ok, tuple(si[:-1]) + (1,) * (len(sd) - 1), ins[2],
                   prog.type(upd).dtype.np)
    return d.op("ScatterND", [ins[0], li, kept], {"reduction": "add"}, names=names)


def _xent(d: _Devices, prog: Program, op: Op, shapes: list, ins: list,
          names: list[str]) -> list[Any]:
    logits, labels = op.inputs
    assert logits is not None and labels is not None
    sz = shapes[0]
    rank, n = len(sz), sz[-1]
    dt, lt = prog.type(logits).dtype.np, prog.type(labels).dtype.np
    z, y = ins
    last = d.same(np.array([rank - 1], np.int64), "last_axis")
    keep = {"keepdims": 1}
    tops = d.collective("MPIAllgather", d.op("ReduceMax", [z, last], keep, hint="max_local"),
                        "max_devices", axis=rank - 1)
    m = d.op("ReduceMax", [tops, last], keep, hint="max")
    shifted = d.op("Sub", [z, m], hint="shifted")
    s = d.op("ReduceSum", [d.op("Exp", [shifted]), last], keep, hint="sum_local")
    lse = d.op("Add", [d.op("Log", [d.collective("MPIAllreduce", s, "sum")]), m], hint="lse")
    hit = d.op("Equal", [d.op("Unsqueeze", [y, last], hint="labels"),
                         d.const(lambda c: np.arange(c * n, (c + 1) * n, dtype=lt),
                                 "classes")], hint="onehot")
    zero = d.same(np.array(0, dt), "zero")
    mean = prog.attrs(op).get("reduction", "sum") == "mean"
    last_names = names if not mean else None
    if op.op_type.endswith("Grad"):
        p = d.op("Exp", [d.op("Sub", [z, lse], hint="logp")], hint="softmax")
        onehot = d.op("Where", [hit, d.same(np.array(1, dt), "one"), zero], hint="onehot_f")
        out = d.op("Sub", [p, onehot], hint="grad", names=last_names)
    else:
        picked = d.op("ReduceSum", [d.op("Where", [hit, z, zero], hint="picked"), last], keep,
                      hint="label_logit_local")
        rows = d.op("Sub", [lse, d.collective("MPIAllreduce", picked, "label_logit")],
                    hint="rows")
        every = d.same(np.arange(rank, dtype=np.int64), "all_axes")
        out = d.op("ReduceSum", [rows, every], {"keepdims": 0}, hint="loss", names=last_names)
    if mean:  # over the labels of this device (a split batch: scaled again by ``lower``)
        count = max(int(np.prod(shapes[1])), 1)
        out = d.op("Mul", [out, d.same(np.array(1.0 / count, dt), "inv_count")], names=names)
    return out
