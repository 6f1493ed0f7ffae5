"""Redistribution: the ops that turn a value's local pieces from one spec into another.

One mesh axis at a time, over each group of devices along that axis:

=====================  ==============================================  ==================
from -> to             ops                                             communication
=====================  ==============================================  ==================
``P -> R``             ``MPIAllreduce``                                yes
``P -> S(d)``          ``MPIReduceScatter(axis=d)``                    yes
``S(d) -> R``          ``MPIAllgather(axis=d)``                        yes
``S(a) -> S(b)``       ``MPIAllgather(axis=a)``, then a local ``Split``  yes
``R -> S(d)``          local ``Split(axis=d)``, each device keeps its block  no
``R``/``S -> P``       refused: a sum cannot be made from a whole value
=====================  ==============================================  ==================

Gathers and reductions run first, local splits last, so that no intermediate spec shards
one dimension over two axes; a reduce-scatter whose dimension is still sharded by another
axis becomes an all-reduce followed by a local split.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from distir.errors import TransformError
from distir.ir.builder import FunctionBuilder
from distir.ir.core import Value
from distir.transforms.spmd.mesh import Mesh, Partial, R, Replicate, Shard, Spec, spec_str

__all__ = ["redistribute", "plan", "Step"]

Cache = dict[Spec, list[Value]]


@dataclass(frozen=True, slots=True)
class Step:
    """One change of one mesh axis: ``kind`` is ``"allgather"``, ``"allreduce"``,
    ``"reduce_scatter"`` (the collective kinds of ``Hardware.comm_time``) or ``"split"``
    (local); ``dim`` the tensor dimension gathered, scattered or split; ``before`` and
    ``after`` the specs around it."""

    kind: str
    axis: int
    dim: int
    before: Spec
    after: Spec
    groups: int = 1
    """The interleaved groups of the shard gathered or made (see ``Shard``)."""


@lru_cache(maxsize=4096)
def plan(src: Spec, dst: Spec) -> tuple[Step, ...]:
    """The steps from ``src`` to ``dst`` (see the module docstring); memoized."""
    for s, d in zip(src, dst, strict=True):
        if isinstance(d, Partial) and not isinstance(s, Partial):
            raise TransformError(f"cannot redistribute {spec_str(src)} to {spec_str(dst)} "
                                 "(a partial sum from a whole value)")
    out: list[Step] = []
    spec = src
    for a in range(len(src)):  # 1. gathers
        s, d = spec[a], dst[a]
        if isinstance(s, Shard) and s != d:
            nxt = _set(spec, a, R)
            out.append(Step("allgather", a, s.dim, spec, nxt, s.groups))
            spec = nxt
    for a in range(len(src)):  # 2. reductions
        s, d = spec[a], dst[a]
        if not isinstance(s, Partial) or isinstance(d, Partial):
            continue
        taken = {p.dim for p in spec if isinstance(p, Shard)}
        if isinstance(d, Shard) and d.dim not in taken and d.groups == 1:
            nxt = _set(spec, a, d)
            out.append(Step("reduce_scatter", a, d.dim, spec, nxt))
        else:
            nxt = _set(spec, a, R)
            out.append(Step("allreduce", a, -1, spec, nxt))
        spec = nxt
    for a in range(len(src)):  # 3. local splits
        s, d = spec[a], dst[a]
        if isinstance(s, Replicate) and isinstance(d, Shard):
            nxt = _set(spec, a, d)
            out.append(Step("split", a, d.dim, spec, nxt, d.groups))
            spec = nxt
    assert spec == dst, (src, dst)
    return tuple(out)


_OPS = {"allgather": "MPIAllgather", "allreduce": "MPIAllreduce",
        "reduce_scatter": "MPIReduceScatter"}


def redistribute(b: FunctionBuilder, mesh: Mesh, pieces: Cache, src: Spec, dst: Spec,
                 name: str) -> list[Value]:
    """The local values of spec ``dst`` (one per mesh rank), made from ``pieces[src]`` with
    ops appended to ``b``. ``pieces`` caches every spec made (intermediate ones too), so a
    second consumer of the same spec reuses them."""
    if dst in pieces:
        return pieces[dst]
    cur = pieces[src]
    for st in plan(src, dst):
        if st.after in pieces:
            cur = pieces[st.after]
            continue
        if st.kind == "split":
            cur = _split(b, mesh, st.axis, st.dim, cur, name, st.groups)
        elif st.kind == "allreduce":
            cur = _collective(b, mesh, st.axis, _OPS[st.kind], cur, name)
        else:
            cur = _collective(b, mesh, st.axis, _OPS[st.kind], cur, name, axis=st.dim)
            if st.groups != 1:  # device-major blocks -> group-major order
                cur = _regroup(b, mesh, st.axis, st.dim, cur, name, st.groups)
        pieces[st.after] = cur
    return cur


def _collective(b: FunctionBuilder, mesh: Mesh, mesh_axis: int, op_type: str,
                cur: list[Value], name: str, **attrs: int) -> list[Value]:
    out = list(cur)
    if mesh.shape[mesh_axis] == 1:
        return out
    for g in mesh.groups(mesh_axis):
        res = b.op(op_type, *(cur[r] for r in g), num_results=len(g),
                   name=[f"{name}_d{mesh.devices[r]}" for r in g], **attrs)
        for r, v in zip(g, res, strict=True):
            out[r] = v
    return out


def _split(b: FunctionBuilder, mesh: Mesh, axis: int, dim: int, cur: list[Value],
           name: str, groups: int = 1) -> list[Value]:
    """Each device's block along ``dim``; with groups, its block of every group, joined."""
    n = mesh.shape[axis]
    if n == 1:
        return list(cur)
    out = []
    for r, c in enumerate(mesh.coords):
        keep = [g * n + c[axis] for g in range(groups)]
        parts = b.op("Split", cur[r], axis=dim, num_outputs=n * groups,
                     name=[f"{name}_d{mesh.devices[r]}" if j in keep else "_"
                           for j in range(n * groups)])
        if groups == 1:
            out.append(parts[c[axis]])
        else:
            out.append(b.op("Concat", *(parts[j] for j in keep), axis=dim,
                            name=f"{name}_d{mesh.devices[r]}"))
    return out


def _regroup(b: FunctionBuilder, mesh: Mesh, axis: int, dim: int, cur: list[Value],
             name: str, groups: int) -> list[Value]:
    """A gathered grouped shard is ``[device 0's groups | device 1's groups | ...]``; put
    the blocks back in group-major order."""
    n = mesh.shape[axis]
    out = []
    for r in range(mesh.size):
        parts = b.op("Split", cur[r], axis=dim, num_outputs=n * groups,
                     name=[f"{name}_d{mesh.devices[r]}"] * (n * groups))
        order = [parts[c * groups + g] for g in range(groups) for c in range(n)]
        out.append(b.op("Concat", *order, axis=dim, name=f"{name}_d{mesh.devices[r]}"))
    return out


def _set(s: Spec, axis: int, p: object) -> Spec:
    return s[:axis] + (p,) + s[axis + 1:]  # type: ignore[return-value]
