"""Layout rules of shape, indexing, normalization and reduction ops (see ``layout_rules``).

A reshape keeps a split when each device's elements are again a split of one output axis:
``(B, T, d) -> (B*T, d)`` keeps the batch split, ``(B, T, d) -> (B, T, H, hd)`` moves a
split of ``d`` onto the heads ``H``, and a split axis merged into an outer one (``(S, B, d)
-> (S*B, d)``) gives a split in interleaved groups (``Shard(0, groups=S)``). Transforms
replace the target shape of a reshape by the local one, so the rule only decides where the
split goes.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from distir.transforms.layout import (
    B,
    Demand,
    Layout,
    Reject,
    T,
    batch_mark,
    batch_offset,
    bt_heads,
    bt_mark,
    is_batch,
    is_bt,
    replicated,
)
from distir.transforms.layout_rules import RuleResult, register

__all__ = ["reshape_layout", "reshape_groups"]

Shape = tuple[int, ...]


def _norm(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _axes(const: Callable, i: int, rank: int) -> list[int] | None:
    v = const(i)
    if v is None:
        return None
    return [_norm(int(a), rank) for a in np.asarray(v).reshape(-1)]


@register("Transpose")
def transpose(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
              const: Callable) -> RuleResult:
    lay = ins[0]
    perm = attrs.get("perm")
    if perm is None:
        perm = tuple(reversed(range(len(lay.marks))))
    return ((Layout(tuple(lay.marks[p] for p in perm), lay.groups), ""),)


def reshape_groups(sa: Shape, so: Shape) -> list[tuple[list[int], list[int]]]:
    """Minimal groups of input and output axes with equal products (size-1 axes at the end
    are left out)."""
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    na, no = len(sa), len(so)
    while i < na and j < no:
        gi, gj = [i], [j]
        pi, pj = sa[i], so[j]
        i += 1
        j += 1
        while pi != pj:
            if pi < pj:
                if i == na:
                    break
                pi *= sa[i]
                gi.append(i)
                i += 1
            else:
                if j == no:
                    break
                pj *= so[j]
                gj.append(j)
                j += 1
        groups.append((gi, gj))
    return groups


def reshape_layout(lay: Layout, sa: Shape, so: Shape) -> Layout:
    """Where a reshape from ``sa`` to ``so`` puts the splits of ``lay``. A batch split may
    be folded inside a merged axis (``"b*N"``) and unfolded again. A ``"t"`` split goes
    where ``_place_split`` finds its blocks again, possibly in interleaved groups: an axis
    split in ``g`` groups unfolded into ``(g, n, ...)`` puts the split on ``n`` (groups no
    longer needed: a fused projection viewed as ``(3, d)``), and ``(g, n, ...)`` with ``n``
    split folded into one axis gives ``g`` interleaved groups (its gradient; sequence-first
    attention's ``(S, B·H, hd) -> (S·B, d)``). The batch and the next axis, split over the
    ranks, merge into one ``"btH"`` axis and unfold again (attention's ``(B·H, S, d)``)."""
    if not any(lay.marks):
        return replicated(len(so))
    out: list[str | None] = [None] * len(so)
    placed = 0
    groups = 1
    for gi, gj in reshape_groups(sa, so):
        marked = [a for a in gi if lay.marks[a]]
        if not marked:
            continue
        if len(marked) > 1:
            merged = _merge_heads(lay, marked, gi, gj, sa, so)
            if merged is None:
                raise Reject("a reshape merges two split axes")
            out[merged[0]] = merged[1]
            placed += 2
            continue
        a = marked[0]
        m = lay.marks[a]
        if m is not None and is_bt(m):
            got = _unmerge_heads(m, a, gi, gj, sa, so)
            if got is None:
                raise Reject("a reshape changes an axis holding the batch and heads")
            for yy, mk in got:
                out[yy] = mk
            placed += 1
            continue
        if m is not None and is_batch(m):
            off = batch_offset(m) * int(np.prod([sa[x] for x in gi if x < a], dtype=np.int64))
            y = _place(off, gj, so)
            if y is None:
                raise Reject("a reshape splits the batch over two axes")
            out[y[0]] = batch_mark(y[1])
            placed += 1
            continue
        at = _place_split(lay.groups, a, gi, gj, sa, so)
        if at is None:
            if lay.groups != 1:
                raise Reject("a reshape changes an axis split in interleaved groups")
            raise Reject(f"a reshape merges split axis {a} into an outer axis that does not "
                         "fit its output axes")
        out[at[0]] = m
        groups = at[1]
        placed += 1
    if placed != sum(1 for m in lay.marks if m):
        raise Reject("a reshape drops a split axis")
    return Layout(tuple(out), groups if T in out else 1)


def _place_split(groups: int, a: int, gi: list[int], gj: list[int], sa: Shape, so: Shape,
                 ) -> tuple[int, int] | None:
    """The output axis and interleaved groups of input axis ``a`` of the group ``gi``,
    split in ``groups`` interleaved groups, once the reshape views ``gi`` as ``gj``; ``None``
    where no output axis holds each device's elements as one split.

    Flattened, the group is ``G = groups · (product of gi before a)`` equal runs, and a
    device holds its block of each run (in ``p`` blocks: ``p`` divides each group of
    ``a``). Output axis ``y`` split in ``g'`` groups holds the same elements exactly when
    the axes of ``gj`` before it multiply to ``G / g'`` and ``g'`` divides ``so[y]``: its
    flattened runs are then the same ``G`` runs, each cut in ``p`` blocks, given that ``p``
    divides ``so[y] / g'``, which the placement check asks (``g' · p`` divides ``so[y]``).
    So ``(S, B·H, hd) -> (S·B, d)`` with axis 1 split keeps the split as ``S`` groups of
    ``B`` rows, right exactly when ``p`` divides ``B`` (not only ``B·H``), as the check of
    ``S·B`` by ``S·p`` asks; ``(3, 4) -> (2, 6)`` with axis 1 split has none (a device's
    elements straddle the rows)."""
    outer = groups * int(np.prod([sa[x] for x in gi if x < a], dtype=np.int64))
    before = 1
    for y in gj:
        n = so[y]
        if before > outer or outer % before:
            return None
        g = outer // before
        if n != 1 and n > g and n % g == 0:
            return y, g
        before *= n
    return None


def _merge_heads(lay: Layout, marked: list[int], gi: list[int], gj: list[int], sa: Shape,
                 so: Shape) -> tuple[int, str] | None:
    """The output axis and mark when a reshape merges the batch axis with the next, split
    over the ranks (``(B, H, ...)`` or ``(B, H·d)`` into ``(B·H, ...)``): ``"btH"``."""
    ab, at = marked
    if lay.marks[ab] != B or lay.marks[at] != T or lay.groups != 1 or \
            [x for x in gi if sa[x] != 1] != [ab, at]:
        return None
    real = [y for y in gj if so[y] != 1]
    if not real:
        return None
    inner = int(np.prod([so[y] for y in real[1:]], dtype=np.int64))
    if sa[at] % inner or so[real[0]] != sa[ab] * (sa[at] // inner):
        return None
    return real[0], bt_mark(sa[at] // inner)


def _unmerge_heads(m: str, a: int, gi: list[int], gj: list[int], sa: Shape, so: Shape,
                   ) -> list[tuple[int, str]] | None:
    """The output axes and marks of an axis marked ``"btH"`` through a reshape: kept whole
    (only 1s added or removed), or unfolded into ``(B, H·k, ...)``: ``"b"`` and ``"t"``."""
    h = bt_heads(m)
    ri = [x for x in gi if sa[x] != 1]
    rj = [y for y in gj if so[y] != 1]
    if not ri or ri[0] != a:
        return None
    inner = int(np.prod([sa[x] for x in ri[1:]], dtype=np.int64))
    if len(ri) == 1 and len(rj) == 1:
        return [(rj[0], m)]
    if len(rj) < 2 or so[rj[0]] * h != sa[a]:
        return None
    rest = int(np.prod([so[y] for y in rj[2:]], dtype=np.int64))
    if so[rj[1]] % h or so[rj[1]] * rest != h * inner:
        return None
    return [(rj[0], B), (rj[1], T)]


def _place(off: int, gj: list[int], so: Shape) -> tuple[int, int] | None:
    """The output axis of group ``gj`` in which a batch that starts after ``off`` elements
    of outer factors lies, and its outer factor within that axis."""
    p = 1
    for y in gj:
        if so[y] == 1:
            continue
        if off < p * so[y]:
            return (y, off // p) if off % p == 0 else None
        p *= so[y]
    return None


@register("Reshape", "Flatten", "Squeeze", "Unsqueeze")
def reshape(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
            const: Callable) -> RuleResult:
    return ((reshape_layout(ins[0], shapes[0], outs[0]), ""),)


@register("Split")
def split(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
          const: Callable) -> RuleResult:
    lay = ins[0]
    axis = _norm(attrs.get("axis", 0), len(lay.marks))
    m = lay.marks[axis]
    if m is None:
        return tuple((lay, "") for _ in outs)
    n = len(outs)
    equal = all(s[axis] == outs[0][axis] for s in outs)
    if m == T and equal and lay.groups == n:
        one = Layout(lay.marks, 1)
        return tuple((one, "") for _ in outs)
    raise Reject(f"Split along an axis split as {m!r}",
                 groups=n if (m == T and equal and lay.groups == 1) else None)


@register("Concat")
def concat(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
           const: Callable) -> RuleResult:
    rank = len(outs[0])
    axis = _norm(attrs.get("axis", 0), rank)
    split = [lay for lay in ins if lay is not None and any(lay.marks)]
    if not split:
        return ((replicated(rank), ""),)
    # the most split input sets the layout (zeros beside a tensor-parallel gradient take it)
    ref = max(split, key=lambda lay: sum(m is not None for m in lay.marks))
    if ref.marks[axis] == T and ref.groups == 1 and len(ins) > 1 and \
            all(s[axis] == shapes[0][axis] for s in shapes):
        # equal parts split alike (the gradients of a fused projection's q, k, v): rank t
        # holds its part of each, which is the whole split in len(ins) interleaved groups
        for i, lay in enumerate(ins):
            if lay != ref:
                raise Demand(i, ref)
        return ((Layout(ref.marks, len(ins)), ""),)
    if ref.marks[axis] is not None:
        raise Reject("Concat along a split axis")
    for i, lay in enumerate(ins):
        if lay != ref:
            raise Demand(i, ref)
    return ((ref, ""),)


@register("Gather")
def gather(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
           const: Callable) -> RuleResult:
    """A gather along a split batch axis is local when the indices are split likewise and
    made from local shapes (``Demand(local=True)``; the analysis checks where they come
    from): each shard picks among its own rows. Along a tensor-parallel axis (an embedding
    table split by vocabulary rows) with indices not known before running, each rank
    looks up the rows it holds and the result is partial over the ranks."""
    data, idx = ins
    axis = _norm(attrs.get("axis", 0), len(data.marks))
    m = data.marks[axis]
    if m is not None:
        if m == T and data.groups == 1 and shapes[0][axis] > 1 and \
                all(d == 1 for d in shapes[1]):  # picks one of n fused parts: n groups
            raise Reject("Gather along a split axis", groups=shapes[0][axis])
        if m == T and data.groups == 1 and T not in idx.marks and const(1) is None:
            # a vocabulary-parallel lookup: each rank picks the rows it holds (zeros for
            # the others, ``vocab_parallel``), the ranks' results are summed
            data = Layout(data.marks[:axis] + (None,) + data.marks[axis + 1:])
            marks = data.marks[:axis] + idx.marks + data.marks[axis + 1:]
            if len({mk for mk in marks if mk}) < sum(mk is not None for mk in marks):
                raise Reject("Gather would split two result axes with one mark")
            return ((Layout(marks), T),)
        if m != B or not shapes[1]:
            raise Reject("Gather along a split axis")
        if idx.marks[0] != B:
            if any(idx.marks):
                raise Reject("Gather along a split axis with indices split otherwise")
            raise Demand(1, Layout((B,) + (None,) * (len(idx.marks) - 1)), local=True)
        data = Layout(data.marks[:axis] + (None,) + data.marks[axis + 1:], data.groups)
    marks = data.marks[:axis] + idx.marks + data.marks[axis + 1:]
    for mk in set(marks) - {None}:
        if marks.count(mk) > 1:
            raise Reject("Gather would split two result axes with one mark")
    return ((Layout(marks, data.groups if T in marks else 1), ""),)


@register("Softmax", "LogSoftmax", "Hardmax", "LpNormalization")
def softmax(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
            const: Callable) -> RuleResult:
    lay = ins[0]
    axis = _norm(attrs.get("axis", -1), len(lay.marks))
    if lay.marks[axis] is not None:
        raise Reject(f"{op_type} along a split axis")
    return ((lay, ""),)


@register("LayerNormalization")
def layer_norm(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
               const: Callable) -> RuleResult:
    lay = ins[0]
    rank = len(lay.marks)
    axis = _norm(attrs.get("axis", -1), rank)
    if any(lay.marks[axis:]):
        raise Reject("LayerNormalization over a split axis")
    for i in (1, 2):
        if i < len(ins) and ins[i] is not None and any(ins[i].marks):
            raise Reject("LayerNormalization with a split scale or bias")
    stat = Layout(lay.marks[:axis] + (None,) * (rank - axis), 1) if any(lay.marks) else \
        replicated(rank)
    return tuple((lay if k == 0 else stat, "") for k in range(len(outs)))


@register("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2",
          "ReduceLogSumExp", "ReduceSumSquare", "ReduceL1", "ReduceLogSum")
def reduce(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
           const: Callable) -> RuleResult:
    lay = ins[0]
    rank = len(lay.marks)
    axes = _axes(const, 1, rank) if len(ins) > 1 and ins[1] is not None else []
    if axes is None:
        raise Reject(f"{op_type} with axes not known before running")
    if not axes:
        axes = [] if attrs.get("noop_with_empty_axes", 0) else list(range(rank))
    reduced = [lay.marks[a] for a in axes if lay.marks[a]]
    if reduced and op_type not in ("ReduceSum", "ReduceMean"):  # a mean is scaled (emit)
        raise Reject(f"{op_type} over a split axis")
    if attrs.get("keepdims", 1):
        marks = tuple(None if a in axes else m for a, m in enumerate(lay.marks))
    else:
        marks = tuple(m for a, m in enumerate(lay.marks) if a not in axes)
    return ((Layout(marks, lay.groups if T in marks else 1), "".join(sorted(reduced))),)


@register("Slice")
def slice_(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
           const: Callable) -> RuleResult:
    lay = ins[0]
    rank = len(lay.marks)
    if not any(lay.marks):
        return ((lay, ""),)
    if len(ins) > 3 and ins[3] is not None:
        axes = _axes(const, 3, rank)
    else:
        starts = const(1)
        axes = None if starts is None else list(range(np.asarray(starts).size))
    if axes is None:
        raise Reject("Slice with axes not known before running")
    if any(lay.marks[a] for a in axes if shapes[0][a] != outs[0][a]):
        raise Reject("Slice of a split axis")
    return ((lay, ""),)


@register("Expand")
def expand(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
           const: Callable) -> RuleResult:
    lay, so = ins[0], outs[0]
    sa = shapes[0]
    off = len(so) - len(sa)
    marks: list[str | None] = [None] * len(so)
    for j, m in enumerate(lay.marks):
        if m is not None and sa[j] == so[off + j]:
            marks[off + j] = m
    return ((Layout(tuple(marks), lay.groups), ""),)


@register("Shape", "Size")
def shape(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
          const: Callable) -> RuleResult:
    # The local shape is a constant of the transformed program (see ``emit``).
    return ((replicated(len(outs[0])), ""),)


@register("NonZero")
def nonzero(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
            const: Callable) -> RuleResult:
    if any(ins[0].marks):  # the result's length depends on every shard's values
        raise Reject(f"{op_type} of a split tensor")
    return ((replicated(len(outs[0])), ""),)
