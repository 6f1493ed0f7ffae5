"""Layout rules of indexing, padding, scanning and generator ops (see ``layout_rules``).

Each keeps a split on the axes it does not index, pad, scan or resize, and refuses a split
of those axes (a shard would need its neighbours' elements). Generators (``Constant``,
``Range``, ``ConstantOfShape``) make whole values; ``ConstantOfShape``'s shape is a
shape operand (``program.SHAPE_OPERANDS``), so a split of its result (demanded by the
batch it is combined with) is made locally at the shard's shape.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from distir.transforms.layout import B, Demand, Layout, Reject, T, replicated
from distir.transforms.layout_rules import RuleResult, register

__all__: list[str] = []


def _norm(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _lay(marks: tuple, like: Layout) -> Layout:
    return Layout(tuple(marks), like.groups if T in marks else 1)


def _keep_except(op_type: str, lay: Layout, axes: list[int], what: str) -> Layout:
    for a in axes:
        if lay.marks[a] is not None:
            raise Reject(f"{op_type} {what} a split axis ({a})")
    return lay


def _const_ints(const: Callable, i: int) -> list[int] | None:
    v = const(i)
    return None if v is None else [int(x) for x in np.asarray(v).reshape(-1)]


@register("Constant", "Range")
def generator(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
              const: Callable) -> RuleResult:
    for lay in ins:
        if lay is not None and any(lay.marks):
            raise Reject(f"{op_type} of a split value")
    return tuple((replicated(len(s)), "") for s in outs)


@register("ConstantOfShape")
def constant_of_shape(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
                      const: Callable) -> RuleResult:
    return ((replicated(len(outs[0])), ""),)


@register("CastLike")
def cast_like(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
              const: Callable) -> RuleResult:
    return ((ins[0], ""),)


@register("GatherElements")
def gather_elements(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
                    const: Callable) -> RuleResult:
    data, idx = ins
    rank = len(data.marks)
    axis = _norm(attrs.get("axis", 0), rank)
    if data.marks[axis] is not None or idx.marks[axis] is not None:
        raise Reject(f"{op_type} along a split axis ({axis})")
    # The other axes pair up one to one (indices may be shorter than data along them).
    for k in range(rank):
        if k == axis:
            continue
        md, mi = data.marks[k], idx.marks[k]
        if md == mi:
            continue
        if md is not None and mi is None:
            if shapes[1][k] != shapes[0][k]:
                raise Reject(f"{op_type}: indices shorter than data along split axis {k}")
            raise Demand(1, _lay(tuple(md if j == k else m for j, m in enumerate(idx.marks)),
                                 data))
        if mi is not None and md is None:
            if shapes[1][k] != shapes[0][k]:
                raise Reject(f"{op_type}: indices shorter than data along split axis {k}")
            raise Demand(0, _lay(tuple(mi if j == k else m for j, m in enumerate(data.marks)),
                                 idx))
        raise Reject(f"{op_type}: data and indices split axis {k} differently")
    return ((idx, ""),)


@register("ScatterElements")
def scatter_elements(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
                     const: Callable) -> RuleResult:
    rank = len(ins[0].marks)
    axis = _norm(attrs.get("axis", 0), rank)
    if any(lay.marks[axis] is not None for lay in ins):
        raise Reject(f"{op_type} along a split axis ({axis})")
    # Data, indices and updates split alike along the same axes (their lengths may differ
    # along ``axis`` only: data longer than the indices, DeBERTa's relative-position
    # scores' gradient): an unsplit one is demanded so (zeros made at the local shape).
    ref_k = next((k for k, lay in enumerate(ins) if any(lay.marks)), 0)
    ref = ins[ref_k]
    split = [a for a, m in enumerate(ref.marks) if m is not None]
    for k, lay in enumerate(ins):
        if lay == ref:
            continue
        if any(lay.marks) or any(shapes[k][a] != shapes[ref_k][a] for a in split):
            raise Reject(f"{op_type}: data, indices and updates are split differently")
        raise Demand(k, ref)
    return ((ref, ""),)


@register("GatherND", "ScatterND")
def gather_nd(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
              const: Callable) -> RuleResult:
    """Splits of the ``batch_dims`` leading axes pass through. Without batch dims, the
    axes of ``data`` that the index tuples do not address keep their splits (rows of the
    result, or of the updates); a ``GatherND`` whose first indexed axis is the split batch
    is local when the indices are split along their first axis and made from local shapes
    (as ``Gather``'s); see ``_scatter_nd`` for the scatter."""
    bd = int(attrs.get("batch_dims", 0))
    if bd == 0:
        if op_type == "ScatterND":
            return _scatter_nd(ins, shapes, attrs)
        return _gather_nd(ins, shapes)
    marked = [lay for lay in ins if lay is not None and any(lay.marks)]
    if not marked:
        return ((replicated(len(outs[0])), ""),)
    ref = marked[0].marks[:bd]
    for k, lay in enumerate(ins[:2]):
        if any(lay.marks[bd:]) or lay.marks[:bd] != ref:
            if not any(lay.marks) and shapes[k][:bd] == shapes[0][:bd]:
                raise Demand(k, Layout(ref + (None,) * (len(lay.marks) - bd)))
            raise Reject(f"{op_type} indexes a split axis")
    if op_type == "ScatterND":
        upd = ins[2]
        want = Layout(ref + (None,) * (len(upd.marks) - bd))
        if upd != want:
            raise Demand(2, want) if not any(upd.marks) else Reject(
                f"{op_type}: updates split unlike data")
        return ((ins[0], ""),)
    return ((Layout(ref + (None,) * (len(outs[0]) - bd)), ""),)


def _gather_nd(ins: tuple, shapes: tuple) -> RuleResult:
    data, idx = ins
    r = shapes[1][-1] if shapes[1] else 0
    if idx.marks and idx.marks[-1] is not None:
        raise Reject("GatherND with split index tuples")
    if data.marks and data.marks[0] == B and not any(data.marks[1:r]) and len(shapes[1]) > 1:
        if idx.marks[0] != B or any(idx.marks[1:]):
            if any(idx.marks):
                raise Reject("GatherND indexes a split axis with indices split otherwise")
            raise Demand(1, Layout((B,) + (None,) * (len(idx.marks) - 1)), local=True)
    elif any(data.marks[:r]):
        raise Reject("GatherND indexes a split axis")
    marks = idx.marks[:-1] + data.marks[r:]
    used = [m for m in marks if m]
    if len(used) != len(set(used)):
        raise Reject("GatherND would split two result axes with one mark")
    return ((_lay(marks, data if T in data.marks else idx), ""),)


def _scatter_nd(ins: tuple, shapes: tuple, attrs: dict) -> RuleResult:
    """``ScatterND`` as ``_scatter_rows``, and also into ``data`` split over the ranks along
    the axis the index tuples (of length 1) address, with ``reduction="add"``: each rank
    adds the updates whose index falls in its rows (``vocab_parallel``; the gradient of a
    vocabulary-parallel embedding)."""
    data, idx, upd = ins
    if shapes[1] and shapes[1][-1] == 1 and data.marks and data.marks[0] == T and \
            data.groups == 1 and attrs.get("reduction") == "add" and \
            T not in idx.marks and T not in upd.marks:
        inner = (Layout((None,) + data.marks[1:]), idx, upd)
        try:
            ((lay, p),) = _scatter_rows(inner, shapes, attrs)
        except Demand as d:
            if d.index == 0:
                raise Demand(0, Layout((T,) + d.layout.marks[1:])) from None
            raise
        return ((Layout((T,) + lay.marks[1:]), p),)
    return _scatter_rows(ins, shapes, attrs)


def _scatter_rows(ins: tuple, shapes: tuple, attrs: dict) -> RuleResult:
    """``ScatterND(data, indices, updates)``: the updates' rows (the axes after the
    indices' leading ones) pair with the axes of ``data`` the index tuples do not address,
    which keep their splits. Updates split along their leading (sample) axes, added into
    zeros (``reduction="add"``: an embedding's gradient) make the result partial: each
    shard scatters its own updates (the analysis checks that ``data`` is zeros). Index
    tuples of one element into ``data`` split along that axis by the batch, with indices
    and updates split likewise, are local (the gradient of ``Gather``'s local case; the
    analysis checks the indices are made from local shapes and splits ``data`` so)."""
    data, idx, upd = ins
    q = len(shapes[1]) - 1
    r = shapes[1][-1]
    if r == 1 and q and data.marks[0] == B and idx.marks[0] == B and upd.marks[0] == B and \
            idx.marks[:q] == upd.marks[:q] and not any(idx.marks[1:]) and \
            upd.marks[q:] == data.marks[1:]:
        # into the split batch axis (an as_strided view's gradient: a flattened batch), with
        # indices made from local shapes (the analysis checks): each shard scatters into its
        # own rows
        return ((data, ""),)
    if idx.marks[q] is not None or any(data.marks[:r]):
        raise Reject("ScatterND with split index tuples or into a split indexed axis")
    lead, rows = upd.marks[:q], upd.marks[q:]
    if idx.marks[:q] != lead:
        if not any(lead):
            raise Demand(2, Layout(idx.marks[:q] + rows))
        if not any(idx.marks):  # data (token ids) or made from local shapes
            raise Demand(1, Layout(lead + (None,)), local=None)
        raise Reject("ScatterND: indices and updates split differently")
    if rows != data.marks[r:]:
        if not any(data.marks) or all(d == w or d is None and w == T
                                      for d, w in zip(data.marks[r:], rows, strict=True)):
            raise Demand(0, _lay(data.marks[:r] + rows, upd))
        if not any(rows):
            raise Demand(2, _lay(lead + data.marks[r:], data))
        raise Reject("ScatterND: updates split unlike data")
    if any(lead):
        if any(rows) or attrs.get("reduction") != "add" or T in lead:
            raise Reject("ScatterND of split updates that is not an addition into zeros")
        return ((replicated(len(shapes[0])), "".join(sorted({m for m in lead if m}))),)
    return ((data, ""),)


@register("Tile")
def tile(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
         const: Callable) -> RuleResult:
    lay = ins[0]
    if not any(lay.marks):
        return ((lay, ""),)
    reps = _const_ints(const, 1)
    if reps is None:
        raise Reject(f"{op_type} with repeats not known before running")
    _keep_except(op_type, lay, [a for a, r in enumerate(reps) if r != 1], "repeats")
    return ((lay, ""),)


@register("Pad")
def pad(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
        const: Callable) -> RuleResult:
    lay = ins[0]
    if not any(lay.marks):
        return ((lay, ""),)
    rank = len(lay.marks)
    pads = _const_ints(const, 1)
    axes = _const_ints(const, 3) if len(ins) > 3 and ins[3] is not None else list(range(rank))
    if pads is None or axes is None:
        raise Reject(f"{op_type} with pads not known before running")
    n = len(axes)
    padded = [_norm(a, rank) for i, a in enumerate(axes) if pads[i] or pads[i + n]]
    return ((_keep_except(op_type, lay, padded, "pads"), ""),)


@register("Trilu")
def trilu(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
          const: Callable) -> RuleResult:
    lay = ins[0]
    rank = len(lay.marks)
    return ((_keep_except(op_type, lay, [rank - 2, rank - 1], "masks"), ""),)


@register("CumSum")
def cumsum(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
           const: Callable) -> RuleResult:
    lay = ins[0]
    if not any(lay.marks):
        return ((lay, ""),)
    axis = _const_ints(const, 1)
    if axis is None:
        raise Reject(f"{op_type} with an axis not known before running")
    return ((_keep_except(op_type, lay, [_norm(axis[0], len(lay.marks))], "scans"), ""),)


@register("ArgMax", "ArgMin")
def arg_reduce(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
               const: Callable) -> RuleResult:
    lay = ins[0]
    axis = _norm(attrs.get("axis", 0), len(lay.marks))
    _keep_except(op_type, lay, [axis], "reduces")
    if attrs.get("keepdims", 1):
        return ((lay, ""),)
    return ((_lay(lay.marks[:axis] + lay.marks[axis + 1:], lay), ""),)


@register("TopK")
def topk(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
         const: Callable) -> RuleResult:
    lay = ins[0]
    axis = _norm(attrs.get("axis", -1), len(lay.marks))
    _keep_except(op_type, lay, [axis], "selects along")
    return ((lay, ""), (lay, ""))


@register("OneHot")
def one_hot(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
            const: Callable) -> RuleResult:
    lay = ins[0]
    rank = len(outs[0])
    axis = _norm(attrs.get("axis", -1), rank)
    return ((_lay(lay.marks[:axis] + (None,) + lay.marks[axis:], lay), ""),)


@register("DepthToSpace", "SpaceToDepth")
def depth_space(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
                const: Callable) -> RuleResult:
    lay = ins[0]
    return ((_keep_except(op_type, lay, list(range(1, len(lay.marks))), "moves"), ""),)


@register("Col2Im")
def col2im(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
           const: Callable) -> RuleResult:
    """Folds each row's columns into an image: a split of the batch carries over; its rows
    (channels and block positions) and columns are not split."""
    lay = ins[0]
    _keep_except(op_type, lay, [1, 2], "folds")
    return ((_lay(lay.marks[:1] + (None,) * (len(outs[0]) - 1), lay), ""),)


@register("Resize")
def resize(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
           const: Callable) -> RuleResult:
    lay = ins[0]
    if not any(lay.marks):
        return ((lay, ""),)
    if len(ins) > 3 and ins[3] is not None:
        raise Reject(f"{op_type} of a split tensor to explicit sizes")
    changed = [a for a, (i, o) in enumerate(zip(shapes[0], outs[0], strict=True)) if i != o]
    return ((_keep_except(op_type, lay, changed, "resizes"), ""),)


@register("Einsum")
def einsum(op_type: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
           const: Callable) -> RuleResult:
    """Each letter of the equation takes the mark of the input axes it names; a marked
    letter absent from the result makes it partial (a split contraction)."""
    eq = str(attrs["equation"]).replace(" ", "")
    if not any(lay is not None and any(lay.marks) for lay in ins):
        return ((replicated(len(outs[0])), ""),)
    if "..." in eq or "->" not in eq:
        raise Reject(f"{op_type} with an implicit or broadcast equation on a split input")
    lhs, rhs = eq.split("->")
    terms = lhs.split(",")
    marks: dict[str, str] = {}
    groups = 1
    for term, lay in zip(terms, ins, strict=True):
        for c, m in zip(term, lay.marks, strict=True):
            if m is None:
                continue
            if marks.get(c, m) != m:
                raise Reject(f"{op_type}: index {c!r} is split differently by two inputs")
            marks[c] = m
            if m == T:
                groups = lay.groups
    for k, (term, lay, shp) in enumerate(zip(terms, ins, shapes, strict=True)):
        want = tuple(marks.get(c) if s != 1 else None for c, s in zip(term, shp, strict=True))
        if want != lay.marks:
            raise Demand(k, Layout(want, groups if T in want else 1))
    out = tuple(marks.get(c) for c in rhs)
    used = [m for m in out if m]
    if len(used) != len(set(used)):
        raise Reject(f"{op_type} would split two result axes with one mark")
    partial = "".join(sorted({m for c, m in marks.items() if c not in rhs}))
    if partial and partial in "".join(used):
        raise Reject(f"{op_type}: one mark splits a contraction and a result axis")
    return ((Layout(out, groups if T in out else 1), partial),)
