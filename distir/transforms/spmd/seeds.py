"""Seeds that reproduce ``dtp``'s data and tensor parallelism as placements on a mesh.

``dtp``'s analysis (``distir.transforms.analyze``) finds the batch inputs and a
Megatron-style split of the weights, structurally (op kinds, shapes, dataflow). Its
layouts become seeds for ``propagate``: a parameter whose axis ``a`` carries the batch
mark is ``Shard(a)`` on the *data* axis of the mesh; a weight whose axis ``a`` carries the
tensor mark is ``Shard(a, groups=g)`` on the *tensor* axis (``g`` interleaved groups: a
fused QKV projection split by heads). ``propagate`` then places every other value, which
on the MLP and GPT-2 gives ``dtp(dp, tp)``'s collectives (see ``docs/spmd.md``).

``optimize`` adds these plans, one per mesh (and on a 1-D mesh both pure data and pure
tensor parallelism), to the candidates it simulates, so that on every mesh it never
returns a plan slower than the grid's configurations without pipeline stages.
"""

from __future__ import annotations

from typing import Any

from distir.errors import DistIRError
from distir.ir.core import Function, Module
from distir.transforms.layout import B, T
from distir.transforms.program import Program
from distir.transforms.spmd.assignment import LayoutAssignment
from distir.transforms.spmd.mesh import Mesh, R, Shard, Spec
from distir.transforms.spmd.propagate import propagate

__all__ = ["dtp_seeds", "dtp_plans"]


def _analysis(fn: Function | Module | Program) -> Any:
    from distir.transforms.plan import analyze

    if isinstance(fn, Program):
        fn = fn.fn
    return analyze(fn)


def dtp_seeds(fn: Function | Module | Program, mesh: Mesh, data_axis: int | None,
              tensor_axis: int | None, analysis: Any = None) -> dict[int, Spec]:
    """``{parameter index: spec}`` on ``mesh``: the batch inputs split along their batch
    axis on ``data_axis``, the weights ``dtp`` splits for ``tp`` = the size of
    ``tensor_axis`` split along their tensor axis there (``None``: that kind of
    parallelism is not used). Parameters not named stay free (``propagate`` places them).
    ``analysis``: ``analyze(fn)``, to share it between meshes."""
    an = analysis if analysis is not None else _analysis(fn)
    sh = an.sharding
    if tensor_axis is not None:
        sh = sh.for_tp(mesh.shape[tensor_axis])
    seeds: dict[int, Spec] = {}
    for n, p in enumerate(an.prog.fn.params):
        lay = sh.layout.get(p)
        if lay is None:
            continue
        spec: list[Any] = [R] * mesh.ndim
        for a, m in enumerate(lay.marks):
            if m == B and data_axis is not None and p in sh.data:
                spec[data_axis] = Shard(a)
            elif m == T and tensor_axis is not None:
                spec[tensor_axis] = Shard(a, groups=lay.groups) if lay.groups > 1 else Shard(a)
        if any(s != R for s in spec):
            seeds[n] = tuple(spec)
    return seeds


def dtp_plans(fn: Function | Module | Program, mesh: Mesh, analysis: Any = None,
              ) -> list[tuple[str, LayoutAssignment]]:
    """``[(label, assignment)]``: ``dtp``'s configurations on ``mesh`` as propagated
    placements. A 1-D mesh of ``N`` gives ``D{N}`` (data) and ``T{N}`` (tensor); a 2-D mesh
    ``(a, b)`` gives ``D{a} T{b}`` (data on the outer axis, tensor on the inner, as
    ``dtp`` numbers devices). A configuration whose seeds do not fit the mesh (a batch the
    data axis does not divide) is left out."""
    prog = fn if isinstance(fn, Program) else Program(fn.entry if isinstance(fn, Module)
                                                     else fn)
    an = analysis if analysis is not None else _analysis(prog)
    if mesh.ndim == 1:
        axes = [(f"D{mesh.size}", 0, None), (f"T{mesh.size}", None, 0)]
    elif mesh.ndim == 2:
        axes = [(f"D{mesh.shape[0]} T{mesh.shape[1]}", 0, 1)]
    else:
        return []
    params = prog.fn.params
    out: list[tuple[str, LayoutAssignment]] = []
    for label, d, t in axes:
        seeds = dtp_seeds(prog, mesh, d, t, an)
        if not seeds:
            continue
        try:
            a = propagate(prog, mesh, {params[n]: s for n, s in seeds.items()})
        except DistIRError:
            continue  # a seed that does not divide its axis: dtp refuses this one too
        out.append((label, a))
    return out
