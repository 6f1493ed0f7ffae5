"""Part of the builder tower (``distir.transforms.tower``, ``dtp`` before the spmd passes).

Where the inputs of a distributed step come from and where its results go.

- ``placed_params``: the default variant's parameters, already on their devices: each
  weight shard (or whole copy) on every device of its stage that uses it, each replica's
  slice of the batch on the ranks of the stages that read it. Parameters are listed in the
  sequential order, each as its copies in (stage, replica, rank) order.
- ``distribute``: the self-contained variant's prologue: the sequential parameters, on
  device 0, are scattered (batch slices, weight shards) and broadcast (whole weights,
  replicas, ranks) to the same places.
- ``gather_results``: the self-contained variant's epilogue: every result back on device
  0 in the sequential shape (replica 0's copy of a value computed once, the whole batch of
  a per-microbatch value).

A weight split in ``g`` interleaved groups (fused QKV) is reshaped to ``(..., g, n/g)`` so
that a plain scatter along the group axis gives every rank its part of each group.
"""

from __future__ import annotations

import numpy as np

from distir.errors import TransformError
from distir.ir.core import Op, Value
from distir.ir.types import DenseAttr, DType, TensorType
from distir.transforms.compose import MainBuilder
from distir.transforms.emit import base_name
from distir.transforms.layout import B, T

__all__ = ["placed_params", "placed_initializers", "distribute", "gather_results"]


def placed_params(mb: MainBuilder) -> dict[Value, tuple[Value, int, int]]:
    """Append the placed parameters; returns, for each, the sequential parameter it holds a
    part of, with its replica and rank (see ``placed_initializers``)."""
    plan, sh = mb.plan, mb.plan.sh
    origin: dict[Value, tuple[Value, int, int]] = {}
    # One object per type (layers repeat their shapes), by dtype then (shape, device).
    by_dtype: dict[DType, dict[tuple, TensorType]] = {}
    for p in mb.prog.fn.params:
        stages = mb.param_stages.get(p)
        if not stages:
            continue
        t0 = mb.prog.type(p)
        types = by_dtype.get(t0.dtype)
        if types is None:
            types = by_dtype[t0.dtype] = {}
        shape = plan.local_shape(p, per_replica=p in sh.data)
        base = base_name(p)
        for s in stages:
            tag = mb.stage_tag(p, s)
            for d in range(plan.written):
                vals = []
                for t, n in enumerate(mb.namer(tag, None, d)(base)):
                    key = (shape, plan.device(d, s, t))
                    ty = types.get(key)
                    if ty is None:
                        ty = types[key] = TensorType(t0.dtype, *key)
                    v = Value(n, ty)
                    vals.append(v)
                    origin[v] = (p, d, t)
                mb.params.extend(vals)
                mb.env[(p, None, d, s)] = vals
    return origin


def placed_initializers(mb: MainBuilder, origin: dict[Value, tuple[Value, int, int]],
                        values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The values of the placed parameters whose sequential parameter is bound (``values``,
    the sequential function's initializers, by name): each rank's shard of a split weight,
    each replica's slice of a split batch input, a copy of anything else; by placed name.

    The same parts ``distribute`` sends, computed here with numpy, so that a distributed
    imported model keeps its weights."""
    plan, sh = mb.plan, mb.plan.sh
    out: dict[str, np.ndarray] = {}
    for v, (p, d, t) in origin.items():
        a = values.get(p.name or "")
        if a is None or v.name is None:
            continue
        a = np.asarray(a)
        lay = sh.layout[p]
        if p in sh.data:
            ax = lay.axis(B)
            if plan.dp > 1 and ax is not None:
                a = np.split(a, plan.dp, axis=ax)[d]
        elif T in lay.marks and plan.tp > 1:
            axis, g = lay.marks.index(T), lay.groups
            n = a.shape[axis]
            grouped = a.reshape(a.shape[:axis] + (g, n // g) + a.shape[axis + 1:])
            part = np.split(grouped, plan.tp, axis=axis + 1)[t]
            a = part.reshape(a.shape[:axis] + (n // plan.tp,) + a.shape[axis + 1:])
        want = v.type.shape if isinstance(v.type, TensorType) else None
        if want is not None and tuple(a.shape) != tuple(want):
            raise TransformError(f"the value of %{p.name} ({tuple(a.shape)}) does not give "
                                 f"%{v.name} its shape {tuple(want)}")
        out[v.name] = np.asarray(a, order="C")  # (ascontiguousarray makes 0-d arrays 1-d)
    return out


class _Out:
    """Appends communication ops to a builder, tracking the device of each value."""

    def __init__(self, mb: MainBuilder) -> None:
        self.mb = mb
        self.dev: dict[Value, int] = {}

    def op(self, op_type: str, ins: list[Value], attrs: dict, names: list[str],
           devices: list[int]) -> list[Value]:
        outs = [Value(n) for n in names]
        self.mb.ops.append(Op(op_type, ins, attrs or None, outs))
        for v, d in zip(outs, devices, strict=True):
            self.dev[v] = d
        return outs

    def fan(self, x: Value, targets: list[int], names: list[str]) -> list[Value]:
        """``x`` on each of ``targets``: itself, a ``Send`` or an ``MPIBroadcast``."""
        if targets == [self.dev[x]]:
            return [x]
        if len(targets) == 1:
            return self.op("Send", [x], {"device": targets[0]}, names, targets)
        return self.op("MPIBroadcast", [x], {"devices": tuple(targets)}, names, targets)

    def reshape(self, x: Value, shape: tuple[int, ...], name: str) -> Value:
        dev = self.dev[x]
        c = self.op("Constant", [], {"value": DenseAttr.from_array(np.array(shape, np.int64)),
                                     "device": dev}, [name + ".shape"], [dev])[0]
        return self.op("Reshape", [x, c], {}, [name], [dev])[0]

    def to(self, x: Value, device: int, name: str) -> Value:
        if self.dev[x] == device:
            return x
        return self.op("Send", [x], {"device": device}, [name], [device])[0]


def distribute(mb: MainBuilder) -> None:
    """Parameters on device 0, distributed like ``placed_params``'s."""
    plan, sh, prog = mb.plan, mb.plan.sh, mb.prog
    out = _Out(mb)
    for p in prog.fn.params:
        t0 = prog.type(p)
        pv = Value(p.name, TensorType(t0.dtype, t0.shape, 0) if isinstance(t0, TensorType)
                   else t0)
        mb.params.append(pv)
        out.dev[pv] = 0
        lay = sh.layout[p]
        for s in mb.param_stages.get(p, ()):
            names = [mb.namer(mb.stage_tag(p, s), None, d)(base_name(p))
                     for d in range(plan.dp)]
            if p in sh.data:
                if plan.dp > 1:
                    src = out.op("MPIScatter", [pv], {"axis": lay.axis(B), "devices": tuple(
                        plan.device(d, s, 0) for d in range(plan.dp))},
                        [n[0] + ".slice" for n in names],
                        [plan.device(d, s, 0) for d in range(plan.dp)])
                else:
                    src = [pv]
                for d in range(plan.dp):
                    mb.env[(p, None, d, s)] = out.fan(src[d], plan.devices(d, s), names[d])
            elif T in lay.marks and plan.tp > 1:
                shards = _scatter_groups(out, pv, prog.shape(p), lay.marks.index(T),
                                         lay.groups, plan.devices(0, s), names[0])
                blocks = [shards] + [[] for _ in range(1, plan.dp)]
                for t in range(plan.tp):
                    if plan.dp > 1:
                        copies = out.fan(shards[t], [plan.device(d, s, t)
                                                     for d in range(1, plan.dp)],
                                         [names[d][t] for d in range(1, plan.dp)])
                        for d in range(1, plan.dp):
                            blocks[d].append(copies[d - 1])
                for d in range(plan.dp):
                    mb.env[(p, None, d, s)] = blocks[d]
            else:
                targets = [plan.device(d, s, t) for d in range(plan.dp) for t in range(plan.tp)]
                copies = out.fan(pv, targets, [n for row in names for n in row])
                for d in range(plan.dp):
                    mb.env[(p, None, d, s)] = copies[d * plan.tp:(d + 1) * plan.tp]


def _scatter_groups(out: _Out, w: Value, shape: tuple[int, ...], axis: int, groups: int,
                    devices: list[int], names: list[str]) -> list[Value]:
    if groups == 1:
        return out.op("MPIScatter", [w], {"axis": axis, "devices": tuple(devices)}, names,
                      devices)
    n = shape[axis]
    tp = len(devices)
    split = shape[:axis] + (groups, n // groups) + shape[axis + 1:]
    wg = out.reshape(w, split, base_name(w) + ".groups")
    parts = out.op("MPIScatter", [wg], {"axis": axis + 1, "devices": tuple(devices)},
                   [x + ".groups" for x in names], devices)
    local = shape[:axis] + (n // tp,) + shape[axis + 1:]
    return [out.reshape(x, local, nm) for x, nm in zip(parts, names, strict=True)]


def gather_results(mb: MainBuilder) -> list[Value]:
    """Every result of the sequential function, on device 0, in its sequential shape."""
    plan, sh, st = mb.plan, mb.plan.sh, mb.plan.st
    out = _Out(mb)
    results: list[Value] = []
    for v in mb.prog.fn.returns:
        lay = sh.layout[v]
        name = base_name(v)
        at = lay.axis(T) if plan.tp > 1 else None
        if st.value_kind.get(v) == "m":
            s = mb.once_stage(v)
            whole = []
            for d in range(plan.dp):
                parts = []
                for t in (range(plan.tp) if at is not None else range(1)):
                    x = mb.concat_microbatches(v, d, t)
                    out.dev[x] = plan.device(d, s, t)
                    parts.append(x)
                if at is not None:
                    if lay.groups != 1:
                        raise TransformError(f"cannot gather %{name}, split in interleaved "
                                             "groups")
                    parts = out.op("MPIGather", parts, {"axis": at, "device": 0},
                                   [f"{name}.dp{d}"], [0])
                whole.append(parts[0])
            if len(whole) == 1:
                results.append(out.to(whole[0], 0, name))
            elif at is not None:
                results.append(out.op("Concat", whole, {"axis": lay.axis(B)}, [name], [0])[0])
            else:
                results.append(out.op("MPIGather", whole, {"axis": lay.axis(B), "device": 0},
                                      [name], [0])[0])
            continue
        s = mb.once_stage(v)
        blocks = mb.once(v, 0, s)
        for t, x in enumerate(blocks):
            out.dev[x] = plan.device(0, s, t)
        if at is None:
            results.append(out.to(blocks[0], 0, name))
            continue
        g = lay.groups
        if g == 1:
            results.append(out.op("MPIGather", blocks, {"axis": at, "device": 0}, [name],
                                  [0])[0])
            continue
        shape = mb.prog.shape(v)
        n = shape[at]
        part = shape[:at] + (g, n // (g * plan.tp)) + shape[at + 1:]
        grouped = [out.reshape(x, part, f"{name}.groups{t}") for t, x in enumerate(blocks)]
        full = out.op("MPIGather", grouped, {"axis": at + 1, "device": 0},
                      [name + ".groups"], [0])[0]
        results.append(out.reshape(full, shape, name))
    return results
