"""Device meshes and per-axis placements: the vocabulary of a layout assignment.

A ``Mesh`` arranges devices in an n-D grid (``(2,)``, ``(dp, tp)``). Every value of an SPMD
program has one ``Placement`` per mesh axis (a ``Spec``):

- ``Shard(d)``: the value's dimension ``d`` is cut into equal contiguous blocks along that
  mesh axis; the device at coordinate ``i`` holds block ``i`` (Unity's partition degree);
- ``Replicate()``: every device along the axis holds the whole value (replica degree);
- ``Partial()``: every device holds a summand; the value is their sum (pending reduction).

All are frozen and hashable, compared by value. A dimension is sharded by at most one mesh
axis (nested shards of one dimension are not supported yet).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TypeAlias

from distir.errors import ConfigError

__all__ = ["Mesh", "Shard", "Replicate", "Partial", "Placement", "Spec", "R", "P",
           "replicated", "local_shape", "spec_str", "shard_dims"]


@dataclass(frozen=True, slots=True)
class Shard:
    """Dimension ``dim`` split in equal contiguous blocks along one mesh axis; with
    ``groups=g`` the dimension is ``g`` equal groups (a fused QKV projection: ``g = 3``),
    each split in blocks, and a device holds its block of every group, in group order
    (DTensor's strided shard, ``dtp``'s interleaved groups)."""

    dim: int
    groups: int = 1

    def __str__(self) -> str:
        return f"S({self.dim})" if self.groups == 1 else f"S({self.dim}, groups={self.groups})"


@dataclass(frozen=True, slots=True)
class Replicate:
    """A whole copy on every device along one mesh axis."""

    def __str__(self) -> str:
        return "R"


@dataclass(frozen=True, slots=True)
class Partial:
    """A summand on every device along one mesh axis; the value is the sum."""

    def __str__(self) -> str:
        return "P"


Placement: TypeAlias = Shard | Replicate | Partial
Spec: TypeAlias = tuple[Placement, ...]
"""One placement per mesh axis."""

R = Replicate()
P = Partial()


@dataclass(frozen=True, slots=True)
class Mesh:
    """``shape``: devices per axis (outer axis first); ``devices``: the device ids in
    row-major order of the coordinates (default ``0 .. size-1``)."""

    shape: tuple[int, ...]
    devices: tuple[int, ...] = ()
    coords: tuple[tuple[int, ...], ...] = field(init=False, repr=False, compare=False)
    """The coordinates of each device, in ``devices`` order."""

    def __post_init__(self) -> None:
        if not self.shape or any(not isinstance(n, int) or n < 1 for n in self.shape):
            raise ConfigError(f"a mesh shape is a tuple of positive integers, got {self.shape}")
        n = 1
        for k in self.shape:
            n *= k
        if not self.devices:
            object.__setattr__(self, "devices", tuple(range(n)))
        if len(self.devices) != n or len(set(self.devices)) != n:
            raise ConfigError(f"a mesh of shape {self.shape} needs {n} distinct devices, got "
                              f"{self.devices}")
        object.__setattr__(self, "coords",
                           tuple(itertools.product(*(range(k) for k in self.shape))))

    @staticmethod
    def of(*shape: int) -> Mesh:
        """``Mesh.of(2)``, ``Mesh.of(dp, tp)``: devices ``0 .. size-1``."""
        return Mesh(tuple(shape))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return len(self.devices)

    def groups(self, axis: int) -> tuple[tuple[int, ...], ...]:
        """The device ranks (indices into ``devices``) that differ only along ``axis``, one
        tuple per group, each in coordinate order."""
        out: dict[tuple[int, ...], list[int]] = {}
        for r, c in enumerate(self.coords):
            out.setdefault(c[:axis] + c[axis + 1:], []).append(r)
        return tuple(tuple(g) for g in out.values())

    def __str__(self) -> str:
        return "x".join(map(str, self.shape))


def replicated(mesh: Mesh) -> Spec:
    return (R,) * mesh.ndim


def spec_str(spec: Spec) -> str:
    return "(" + ", ".join(map(str, spec)) + ")"


def shard_dims(spec: Spec) -> dict[int, int]:
    """``{tensor dim: mesh axis}`` of the ``Shard`` placements."""
    return {p.dim: a for a, p in enumerate(spec) if isinstance(p, Shard)}


def local_shape(shape: tuple[int, ...], spec: Spec, mesh: Mesh) -> tuple[int, ...]:
    """The shape each device holds: dimension ``d`` divided by the size of the mesh axis
    that shards it (the caller has checked divisibility, see ``check_spec``)."""
    out = list(shape)
    for a, p in enumerate(spec):
        if isinstance(p, Shard):
            out[p.dim] //= mesh.shape[a]
    return tuple(out)


def check_spec(shape: tuple[int, ...], spec: Spec, mesh: Mesh) -> str | None:
    """Why ``spec`` cannot place a tensor of ``shape`` on ``mesh``, or ``None``."""
    if len(spec) != mesh.ndim:
        return f"{len(spec)} placements for a {mesh.ndim}-D mesh"
    seen: set[int] = set()
    for a, p in enumerate(spec):
        if isinstance(p, Shard):
            if not 0 <= p.dim < len(shape):
                return f"Shard({p.dim}) of a rank-{len(shape)} tensor"
            if p.dim in seen:
                return f"dimension {p.dim} sharded by two mesh axes"
            seen.add(p.dim)
            if shape[p.dim] % (mesh.shape[a] * p.groups):
                g = f" in {p.groups} groups" if p.groups != 1 else ""
                return (f"mesh axis {a} ({mesh.shape[a]} devices) does not divide dimension "
                        f"{p.dim} (size {shape[p.dim]}){g}")
    return None
