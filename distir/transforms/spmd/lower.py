"""Lowering a layout assignment to an SPMD DistIR program.

``lower(assignment)`` writes, for every live op of the sequential program, one copy per
mesh device on that device's local pieces (local shapes), and between a producer and a
consumer that disagree the redistribution ops of ``redistribute`` (collectives, or local
``Split`` blocks). Shapes that ops take as operands (the target of ``Reshape``/``Expand``,
``ConstantOfShape``'s shape, ``Split``'s sizes) become per-device constants of the local
shape; values known before running (shape chains, small constants) become per-device
``Constant`` ops; a mean over a sharded axis (``reduction="mean"`` losses, ``ReduceMean``)
is scaled by ``1/axis size`` so that summing the pieces gives the global mean.

Two variants, as for ``dtp``:

- default: parameters are already placed, ``{name}_d{device}`` per device in (parameter,
  mesh rank) order, each of its local shape; results are every device's local piece of
  every sequential result, in (result, mesh rank) order (a result that is ``Partial`` on
  an axis is all-reduced first: a result is a value, not summands);
- ``self_contained=True``: the sequential parameters (whole, on the sequential program's
  device); each is broadcast to the mesh and cut locally; each result is made whole
  (all-gathers, all-reduces) and the copy on the sequential device is returned, so
  ``distir.execute`` of the lowered program equals that of the sequential one.
"""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from distir.errors import TransformError
from distir.ir.builder import FunctionBuilder
from distir.ir.core import Function, Op, Value
from distir.ir.types import TensorType
from distir.ir.verify import verify
from distir.transforms.program import Program
from distir.transforms.spmd.aligned import aligned_axis, index_only, local_indices
from distir.transforms.spmd.assignment import LayoutAssignment, is_shape_operand
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
from distir.transforms.spmd.redistribute import Cache, redistribute
from distir.transforms.spmd.rules import Outcome
from distir.transforms.spmd.vocab import vocab_axis, write_vocab

__all__ = ["lower", "split_sizes", "bias_once", "local_attrs", "made_as",
           "BROADCASTS"]


def lower(assignment: LayoutAssignment, *, self_contained: bool = False) -> Function:
    """The SPMD program of ``assignment`` (see the module docstring); verified."""
    assignment.check()
    fn = _Lowering(assignment).run(self_contained)
    verify(fn, num_devices=max(assignment.mesh.devices) + 1)
    return fn


def _name(v: Value) -> str:
    return v.name if v.name and v.name != "_" else "v"


def _names(v: Value, devices: tuple[int, ...]) -> list[str]:
    """Local names ``{name}_d{device}``; a discarded result (``_``) stays discarded."""
    if v.name == "_":
        return ["_"] * len(devices)
    return [f"{_name(v)}_d{d}" for d in devices]


class _Lowering:
    def __init__(self, a: LayoutAssignment) -> None:
        self.a = a
        self.prog = a.prog
        self.mesh = a.mesh
        self.b = FunctionBuilder(a.prog.fn.name)
        self.pieces: dict[Value, Cache] = {}
        self.needs: dict[Value, list[tuple]] = {}
        """The specs each value is read as, other than its own, in program order: made
        right after the value is (so collectives can overlap later compute)."""
        self.read_as: dict[Value, set[Spec]] = {v: {replicated(self.mesh)}
                                                 for v in a.prog.fn.returns}
        """Every spec each value is read in (a result: whole)."""
        self.index_only = index_only(a.prog, a.reads.__getitem__)
        """Ops read only as an aligned lookup's indices: not written."""
        for op, reads in zip(a.prog.ops, a.reads, strict=True):
            if not reads:
                continue
            aligned = aligned_axis(a.prog, op, reads) is not None
            for k, (v, s) in enumerate(zip(op.inputs, reads, strict=True)):
                if v is None or s is None or is_shape_operand(op, k) or (aligned and k == 1):
                    continue
                self.read_as.setdefault(v, set()).add(s)
                if s != a.spec(v) and s not in self.needs.setdefault(v, []):
                    self.needs[v].append(s)

    def _made(self, v: Value) -> None:
        for s in self.needs.get(v, ()):
            self._get(v, s)

    def _get(self, v: Value, spec: tuple) -> list[Value]:
        return redistribute(self.b, self.mesh, self.pieces[v], self.a.spec(v), spec, _name(v))

    def _const(self, arr: np.ndarray, hint: str) -> list[Value]:
        return [self._const_on(arr, d, hint) for d in self.mesh.devices]

    def _const_on(self, arr: np.ndarray, device: int, hint: str,
                  apart: Hashable = None) -> Value:
        """A constant of its own on ``device`` (``vocab.Const``: none is shared here, so
        ``apart`` changes nothing)."""
        return self.b.op("Constant", value=arr, device=device, name=f"{hint}_d{device}")

    def run(self, self_contained: bool) -> Function:
        prog, mesh, b = self.prog, self.mesh, self.b
        for p, spec in zip(prog.fn.params, self.a.params, strict=True):
            t = prog.type(p)
            if not isinstance(t, TensorType):
                raise TransformError(f"parameter %{p.name} is not a tensor")
            if self_contained:
                whole = b.param(p.name, t)
                copies = b.op("MPIBroadcast", whole, devices=list(mesh.devices),
                              num_results=mesh.size,
                              name=[f"{p.name}_d{d}" for d in mesh.devices])
                copies = [copies] if mesh.size == 1 else list(copies)
                self.pieces[p] = {replicated(mesh): copies}
                self.pieces[p][spec] = redistribute(b, mesh, self.pieces[p],
                                                    replicated(mesh), spec, _name(p))
            else:
                shp = local_shape(t.shape, spec, mesh)
                self.pieces[p] = {spec: [b.param(f"{p.name}_d{d}", TensorType(t.dtype, shp, d))
                                         for d in mesh.devices]}
        for p in prog.fn.params:
            self._made(p)
        for i in prog.live_ops:
            if i not in self.index_only:
                self._op(prog.ops[i], i)
        rets: list[Value] = []
        for v in prog.fn.returns:
            if not self_contained:
                spec = self.a.spec(v)
                summed = tuple(R if isinstance(x, Partial) else x for x in spec)
                rets.extend(self._get(v, summed))  # a result is a value, not summands
                continue
            copies = self._get(v, replicated(mesh))
            dev = prog.type(v).device if isinstance(prog.type(v), TensorType) else 0
            if dev in mesh.devices:
                rets.append(copies[mesh.devices.index(dev)])
            else:
                rets.append(b.op("Send", copies[0], device=dev, name=_name(v)))
        return b.ret(*rets)

    def _op(self, op: Op, i: int) -> None:
        prog, mesh, b = self.prog, self.mesh, self.b
        reads = self.a.reads[i]
        out = self.a.outcomes[i]
        assert reads is not None and out is not None
        out = made_as(prog, op, out, self.read_as.get(op.outputs[0], set()))
        if not reads:  # known before running: a constant on every device
            for o in op.outputs:
                arr = prog.constant(o)
                if arr is None:  # Shape/Size of a value too large to keep: its shape
                    raise TransformError(f"`{prog.op_text(op)}`: its result is not known "
                                         "before running")
                self.pieces[o] = {replicated(mesh): self._const(np.asarray(arr), _name(o))}
            return
        ins: list[list[Value | None]] = []
        for k, (v, s) in enumerate(zip(op.inputs, reads, strict=True)):
            if v is None:
                ins.append([None] * mesh.size)
            elif is_shape_operand(op, k):
                ins.append(list(self._shape_operand(op, k, out.outs)))
            elif k == 1 and aligned_axis(prog, op, reads) is not None:  # known indices
                ins.append([self._const_on(local_indices(prog, op, reads, mesh, c), d,
                                           _name(v)) for c, d in zip(mesh.coords,
                                                                     mesh.devices,
                                                                     strict=True)])
            else:
                assert s is not None
                ins.append(list(self._get(v, s)))
        attrs = local_attrs(op, reads, mesh)
        results: list[list[Value]] = [[] for _ in op.outputs]
        once = bias_once(op, reads, out.outs)
        vocab = vocab_axis(prog, op, reads) is not None
        if vocab:  # its own local ops and collectives
            results = [write_vocab(b, prog, mesh, op, reads, ins, list(range(mesh.size)),
                                   mesh.devices.__getitem__, self._const_on,
                                   _names(op.outputs[0], mesh.devices))]
        for r, d in enumerate(() if vocab else mesh.devices):
            if not op.inputs:
                attrs["device"] = d
            names = [_names(o, (d,))[0] for o in op.outputs]
            args = [x[r] for x in ins]
            if any(mesh.coords[r][a] for a in once):
                args = args[:2]
            res = b.op(op.op_type, *args, name=names, num_results=len(op.outputs), **attrs)
            res = (res,) if len(op.outputs) == 1 else res
            for k, v in enumerate(res):
                results[k].append(v)
        for k, (o, axes) in enumerate(zip(op.outputs, out.scaled, strict=True)):
            if axes:
                n = int(np.prod([mesh.shape[a] for a in axes]))
                dt = prog.type(o).dtype.np
                c = self._const(np.asarray(1.0 / n, dtype=dt), f"{_name(o)}_scale")
                results[k] = [b.op("Mul", x, cc, name=f"{_name(o)}_d{d}")
                              for x, cc, d in zip(results[k], c, mesh.devices, strict=True)]
            self.pieces[o] = {out.outs[k]: results[k]}
            self._made(o)

    def _shape_operand(self, op: Op, k: int, outs: tuple) -> list[Value]:
        """The local value of a shape operand: the local result shape, or ``Split``'s
        local sizes."""
        if op.op_type == "Split":
            return self._const(split_sizes(self.prog, op, k, outs, self.mesh), "sizes")
        shp = local_shape(self.prog.shape(op.outputs[0]), outs[0], self.mesh)
        return self._const(np.asarray(shp, dtype=np.int64), "shape")


BROADCASTS = frozenset({"Expand", "ConstantOfShape"})
"""Ops that broadcast their input to a result shape given as a shape operand."""


def made_as(prog: Program, op: Op, out: Outcome, read_as: set[Spec]) -> Outcome:
    """The outcome ``op`` is written in: as the rules give it, but an ``Expand`` or
    ``ConstantOfShape`` (a broadcast whose result shape is a shape operand, the lowering's
    local one) of a whole result that every reader reads as one other spec, splitting only
    dimensions the broadcast makes, is written at that spec's local shape: equal to each
    device's block of the whole one, without making it (the zeros a vocabulary-split
    gradient is scattered into)."""
    if op.op_type not in BROADCASTS or len(read_as) != 1:
        return out
    (want,) = read_as
    if want == out.outs[0] or any(not isinstance(p, Replicate) for p in out.outs[0]) or \
            any(isinstance(p, Partial) for p in want):
        return out
    rank = len(prog.shape(op.outputs[0]))
    x = op.inputs[0]
    made = set(range(rank))  # ConstantOfShape: every dimension
    if op.op_type == "Expand" and x is not None:
        shp = prog.shape(x)
        made = {d for d in range(rank) if d < rank - len(shp)
                or shp[d - rank + len(shp)] == 1}
    if any(isinstance(p, Shard) and p.dim not in made for p in want):
        return out
    return Outcome((want,), out.scaled)


def local_attrs(op: Op, reads: tuple, mesh: Mesh) -> dict:
    """``op``'s attributes on each device: a grouped convolution (or its gradient) whose
    channels are split convolves its own channels' groups (``group`` divided by the mesh
    axes that split its input's channel axis, as ``dtp``'s ``local_group``)."""
    attrs = dict(op.attrs)
    g = int(attrs.get("group", 1) or 1)  # type: ignore[arg-type]
    if g != 1 and op.op_type in ("Conv", "ConvGrad") and reads and reads[0] is not None:
        for a, p in enumerate(reads[0]):
            if isinstance(p, Shard) and p.dim == 1:
                g //= mesh.shape[a]
        attrs["group"] = g
    return attrs


def bias_once(op: Op, reads: tuple, outs: tuple) -> tuple[int, ...]:
    """The mesh axes on which a ``Gemm`` or ``Conv`` with a partial result (a split
    contraction) reads its bias whole: only the devices at coordinate 0 of those axes add
    it, so that the sum holds it once (as ``dtp``'s emitter does)."""
    if op.op_type not in ("Gemm", "Conv") or len(op.inputs) < 3 or op.inputs[2] is None:
        return ()
    bias = reads[2]
    return tuple(a for a, p in enumerate(outs[0])
                 if isinstance(p, Partial) and bias is not None and not isinstance(bias[a],
                                                                                   Partial))


def split_sizes(prog: Program, op: Op, k: int, outs: tuple, mesh: Mesh) -> np.ndarray:
    """``Split``'s sizes operand (input ``k``) on each device: each result's local size
    along the split axis (a split of an axis held in interleaved groups, ``Shard(d,
    groups=g)`` with ``g`` the number of results, gives each device its part of each)."""
    arr = prog.const(op.inputs[k])
    if arr is None:
        raise TransformError(f"`{prog.op_text(op)}`: split sizes not known before running")
    arr = np.asarray(arr)
    x = op.inputs[0]
    assert x is not None  # a Split has its data input
    axis = int(prog.attrs(op).get("axis", 0))
    axis = axis + len(prog.shape(x)) if axis < 0 else axis
    local = [local_shape(prog.shape(o), spec, mesh)[axis]
             for o, spec in zip(op.outputs, outs, strict=True)]
    return np.asarray(local, dtype=arr.dtype).reshape(arr.shape)
