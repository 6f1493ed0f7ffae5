"""Layouts: how a value of the sequential program is split over the devices of a D/T/P
configuration.

A layout marks each axis of a tensor with ``None`` (whole), ``"b"`` (split over the batch
shards: the ``dp`` replicas times the ``K`` microbatches) or ``"t"`` (split over the ``tp``
tensor-parallel ranks). A ``"t"`` axis may be split in ``groups`` interleaved groups: a fused
QKV weight ``(d, 3d)`` is split so that every rank holds its own heads' columns of Q, K and V
(``groups=3``), and a ``Split`` into three then gives each rank its Q, K and V heads.

Layouts do not depend on the degrees: the same analysis serves every configuration, and a
local shape is the global shape with the ``"b"`` axis divided by ``dp·K`` and the ``"t"`` axis
by ``tp``. A value may also be *partial* over ``"b"`` or ``"t"``: each shard holds a summand
of the value (a weight gradient summed over the batch, the product of a row-parallel
matmul); the transform inserts the sum (an allreduce, or an accumulation over microbatches).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

__all__ = ["Layout", "replicated", "Reject", "Demand", "local_shape", "B", "T", "is_batch",
           "batch_mark", "batch_offset", "bt_mark", "is_bt", "bt_heads", "t_axis"]

B = "b"
"""The batch mark: split over ``dp`` replicas and ``K`` microbatches. ``"b*N"`` marks an
axis that holds the batch inside it, after ``N`` elements of outer factors (``(S, B, d)``
viewed as ``(S·B, d)``: axis 0 is ``"b*S"``): each shard holds ``N`` strided runs of its
batch; only ops that treat that axis row by row may take it."""
T = "t"
"""The tensor-parallel mark: split over ``tp`` ranks."""
BT = "bt"
"""The prefix of ``"btH"``: an axis that is the batch (outer, split over the batch shards)
times ``H`` heads (inner, split over the ``tp`` ranks), as attention merges ``(B, H, S, d)``
into ``(B·H, S, d)``. Each device holds its batch shard's rows, each a run of its ``H / tp``
heads; only ops that treat the axis row by row may take it (a transpose of the other axes,
elementwise ops), and a reshape unfolds it into ``(B, H)`` again."""


def is_batch(m: str | None) -> bool:
    """Whether ``m`` is a batch mark (``"b"`` or ``"b*N"``)."""
    return m is not None and m[0] == B


def batch_offset(m: str) -> int:
    """The outer factor ``N`` of a batch mark ``"b*N"`` (1 for ``"b"`` and ``"btH"``)."""
    return 1 if m == B or m[:2] == BT else int(m[2:])


def bt_mark(heads: int) -> str:
    """The mark of a batch axis merged with ``heads`` tensor-parallel heads inside it."""
    return f"{BT}{heads}"


def is_bt(m: str | None) -> bool:
    """Whether ``m`` marks a batch axis with tensor-parallel heads inside (``"btH"``)."""
    return m is not None and m[:2] == BT


def bt_heads(m: str) -> int:
    """The number of heads ``H`` inside the axis marked ``"btH"``."""
    return int(m[2:])


def t_axis(lay: Layout) -> int | None:
    """The axis split over the ``tp`` ranks: marked ``"t"`` or ``"btH"``."""
    return next((a for a, m in enumerate(lay.marks) if m == T or is_bt(m)), None)


def batch_mark(offset: int) -> str:
    return B if offset == 1 else f"{B}*{offset}"


@dataclass(frozen=True, slots=True)
class Layout:
    """Per-axis marks (``None``, ``"b"``, ``"t"``) and the interleaved groups of the ``"t"``
    axis. Immutable and hashable; compared by value."""

    marks: tuple[str | None, ...]
    groups: int = 1

    def axis(self, mark: str) -> int | None:
        """The axis split by ``mark``, or ``None``."""
        try:
            return self.marks.index(mark)
        except ValueError:
            return None

    @property
    def is_replicated(self) -> bool:
        return not any(self.marks)

    def has(self, mark: str) -> bool:
        return mark in self.marks

    def with_marks(self, marks: tuple[str | None, ...]) -> Layout:
        return Layout(marks, self.groups if T in marks else 1)

    def __str__(self) -> str:
        inner = ", ".join(m or "_" for m in self.marks)
        g = f" groups={self.groups}" if self.groups != 1 else ""
        return f"[{inner}]{g}"


@cache
def replicated(rank: int) -> Layout:
    """The layout of a whole (unsplit) value of rank ``rank``."""
    return Layout((None,) * rank)


def local_shape(shape: tuple[int, ...], layout: Layout, nb: int, tp: int) -> tuple[int, ...]:
    """The shape of one shard: the ``"b"`` axis divided by ``nb``, the ``"t"`` axis by ``tp``
    (the caller has checked divisibility)."""
    if not any(layout.marks):
        return shape
    out = list(shape)
    for i, m in enumerate(layout.marks):
        if m is not None and m[0] == B:
            out[i] //= nb
            if m[:2] == BT:
                out[i] //= tp
        elif m == T:
            out[i] //= tp
    return tuple(out)


class Reject(Exception):
    """A layout rule cannot run the op locally on these layouts. ``groups`` suggests the
    interleaved group count that would make it work (a ``Split`` of a fused projection)."""

    def __init__(self, message: str, groups: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.groups = groups


class Demand(Exception):
    """A layout rule needs input ``index`` (a parameter) to have ``layout``: the bias of a
    column-parallel projection, the weight of a row-parallel one. ``local`` marks indices
    into a batch-split tensor: each shard must compute them from its own (local) shapes,
    as ``Range(0, batch)`` does, so that they index its own rows; ``None``, indices that
    may be either (a scatter's: where they are local, ``data`` is split with them)."""

    def __init__(self, index: int, layout: Layout, local: bool | None = False) -> None:
        super().__init__(f"input {index} needs layout {layout}")
        self.index = index
        self.layout = layout
        self.local = local
