"""Lowerings of the ONNX indexing, sorting, contraction and rearranging ops exported models
use beyond the minimum set: GatherElements, GatherND, ScatterElements, OneHot, NonZero,
CumSum, TopK, Einsum, Pad, DepthToSpace, SpaceToDepth (ONNX opset 21 semantics).

Shapes, axes and index tables that depend only on types (Pad's index maps, TopK's K,
OneHot's depth, GatherND's strides) are worked out once at compile time. Negative indices
count from the end, as in ONNX.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from distir.backend._dynamic import by_value, unknown
from distir.backend.lowering import LOWERINGS, Kernel, Static, torch_dtype
from distir.errors import UnsupportedError


def _known_int(s: Static, i: int, what: str) -> int:
    c = s.const(i)
    if c is None:
        raise UnsupportedError(f"{what} must be known before the run (a Constant)")
    return int(c.reshape(-1)[0])


def _wrap(i: torch.Tensor, n: int | torch.Tensor) -> torch.Tensor:
    """Indices made non-negative (``-1`` is the last of ``n``), as int64. An index broadcast
    along some axes (an ``Expand``'s view: stride 0) is wrapped once per distinct element
    and broadcast again, so that the gather or scatter reads it as the view it was:
    wrapping it whole writes every broadcast copy (three passes over DeBERTa's relative
    positions expanded over batch and heads, 25 M int64 a layer, took twice the gather's
    own time on an H200)."""
    i = i.long()
    if i.dim() and i.numel() > 1 and 0 in i.stride():
        distinct = i[tuple(slice(0, 1) if st == 0 else slice(None) for st in i.stride())]
        return torch.where(distinct < 0, distinct + n, distinct).expand(i.shape)
    return torch.where(i < 0, i + n, i)


@LOWERINGS.register("GatherElements")
def _gather_elements(s: Static) -> Kernel:
    rank = s.inp(0).rank
    axis = int(s.attrs.get("axis", 0)) % rank
    n = s.inp(0).shape[axis]
    return lambda x, i: (torch.gather(x, axis, _wrap(i, n)),)


@LOWERINGS.register("GatherND")
def _gather_nd(s: Static) -> Kernel:
    """The ``b`` batch axes are flattened into one; the ``k`` indexed axes of each batch
    entry are addressed by one linear index."""
    data, ind = s.inp(0), s.inp(1)
    b = int(s.attrs.get("batch_dims", 0))
    k = ind.shape[-1]
    batch = int(np.prod(data.shape[:b], dtype=np.int64))
    dims = data.shape[b:b + k]
    rest = data.shape[b + k:]
    strides = torch.tensor([int(np.prod(dims[j + 1:], dtype=np.int64)) for j in range(k)],
                           dtype=torch.int64, device=s.device)
    sizes = torch.tensor(dims, dtype=torch.int64, device=s.device)
    out_shape = s.out().shape
    rows = torch.arange(batch, device=s.device).view(batch, 1)

    def kern(x: torch.Tensor, i: torch.Tensor) -> tuple:
        flat = (_wrap(i, sizes) * strides).sum(-1).reshape(batch, -1)
        xv = x.reshape(batch, int(np.prod(dims, dtype=np.int64)), *rest)
        return (xv[rows, flat].reshape(out_shape),)

    return kern


_SCATTER_REDUCE = {"mul": "prod", "max": "amax", "min": "amin"}


@LOWERINGS.register("ScatterElements")
def _scatter_elements(s: Static) -> Kernel:
    rank = s.inp(0).rank
    axis = int(s.attrs.get("axis", 0)) % rank
    n = s.inp(0).shape[axis]
    red = s.attrs.get("reduction", "none")
    if red == "none":
        return lambda x, i, u: (x.scatter(axis, _wrap(i, n), u),)
    if red == "add":
        if s.donate[0]:  # in place where the program is done with x (no copy of it)
            return lambda x, i, u: ((x.scatter_add_(axis, _wrap(i, n), u) if x.is_contiguous()
                                     else x.scatter_add(axis, _wrap(i, n), u)),)
        return lambda x, i, u: (x.scatter_add(axis, _wrap(i, n), u),)
    how = _SCATTER_REDUCE[red]
    return lambda x, i, u: (x.scatter_reduce(axis, _wrap(i, n), u, how, include_self=True),)


@LOWERINGS.register("OneHot")
def _one_hot(s: Static) -> Kernel:
    """``values[1]`` where the index (from the end if negative) hits, ``values[0]``
    elsewhere; an index out of ``[-depth, depth)`` hits nothing."""
    out = s.out()
    rank = out.rank
    axis = int(s.attrs.get("axis", -1)) % rank
    depth = out.shape[axis]

    def k(ind: torch.Tensor, _depth: torch.Tensor, values: torch.Tensor) -> tuple:
        i = _wrap(ind, depth)
        valid = (i >= 0) & (i < depth)
        hot = F.one_hot(torch.where(valid, i, 0), depth).bool() & valid.unsqueeze(-1)
        hot = hot.movedim(-1, axis)
        return (torch.where(hot, values[1], values[0]),)

    return k


@LOWERINGS.register("NonZero")
def _nonzero(s: Static) -> Kernel:
    """Typed only for an input known before the run, so the count matches the type."""
    return lambda x: (torch.nonzero(x).t().contiguous(),)


@LOWERINGS.register("CumSum")
def _cumsum(s: Static) -> Kernel:
    if unknown(s, (1,)):
        return by_value(s, (1,), _cumsum)
    rank = s.inp(0).rank
    axis = _known_int(s, 1, "the axis of CumSum") % rank
    exclusive, reverse = bool(s.attrs["exclusive"]), bool(s.attrs["reverse"])
    n = s.inp(0).shape[axis]

    def k(x: torch.Tensor, _axis: torch.Tensor) -> tuple:
        y = x.flip(axis) if reverse else x
        c = torch.cumsum(y, dim=axis)
        if exclusive:  # shift by one: 0, x0, x0 + x1, ...
            c = torch.cat([torch.zeros_like(c.narrow(axis, 0, min(1, n))),
                           c.narrow(axis, 0, max(n - 1, 0))], dim=axis)
        return (c.flip(axis) if reverse else c,)

    return k


@LOWERINGS.register("TopK")
def _topk(s: Static) -> Kernel:
    """A stable sort, so equal values keep the lower index first (the ONNX order)."""
    rank = s.inp(0).rank
    axis = int(s.attrs["axis"]) % rank
    largest = bool(s.attrs["largest"])
    k = s.out(0).shape[axis]

    def kern(x: torch.Tensor, _k: torch.Tensor) -> tuple:
        vals, idx = torch.sort(x, dim=axis, descending=largest, stable=True)
        return (vals.narrow(axis, 0, k), idx.narrow(axis, 0, k))

    return kern


@LOWERINGS.register("Einsum")
def _einsum(s: Static) -> Kernel:
    eq = str(s.attrs["equation"]).replace(" ", "")
    dt = torch_dtype(s.out().dtype)
    return lambda *xs: (torch.einsum(eq, *xs).to(dt),)


_NUMPY_PAD: dict[str, Any] = {"edge": "edge", "reflect": "reflect", "wrap": "wrap"}


@LOWERINGS.register("Pad")
def _pad(s: Static) -> Kernel:
    """``constant``: ``F.pad`` (any rank, negative pads crop); ``edge``/``reflect``/
    ``wrap``: one ``index_select`` per padded axis by an index map made once."""
    if unknown(s, (1, 3)):
        return by_value(s, (1, 3), _pad)
    x_t = s.inp(0)
    rank = x_t.rank
    pads = [int(v) for v in _const(s, 1, "the pads of Pad")]
    axes_c = s.const(3) if len(s.in_types) > 3 and s.in_types[3] is not None else None
    if len(s.in_types) > 3 and s.in_types[3] is not None and axes_c is None:
        raise UnsupportedError("the axes of Pad must be known before the run")
    axes = (list(range(rank)) if axes_c is None
            else [int(a) % rank for a in axes_c.reshape(-1)])
    n = len(axes)
    begin, end = [0] * rank, [0] * rank
    for j, a in enumerate(axes):
        begin[a], end[a] = pads[j], pads[n + j]
    mode = s.attrs.get("mode", "constant")
    if mode == "constant":
        arg: list[int] = []
        for a in reversed(range(rank)):
            arg += [begin[a], end[a]]
        has_value = len(s.in_types) > 2 and s.in_types[2] is not None
        c = s.const(2) if has_value else None
        if not has_value or c is not None:
            value = 0 if c is None else c.reshape(-1)[0].item()
            return lambda x, *_: (F.pad(x, arg, value=value),)
        return lambda x, _p, v, *_: (F.pad(x, arg, value=v.reshape(-1)[0].item()),)
    maps: list[tuple[int, torch.Tensor]] = []
    for a in range(rank):
        if begin[a] == 0 and end[a] == 0:
            continue
        idx = np.arange(x_t.shape[a])
        idx = idx[max(-begin[a], 0):len(idx) - max(-end[a], 0)]  # negative pads crop
        idx = np.pad(idx, (max(begin[a], 0), max(end[a], 0)), mode=_NUMPY_PAD[mode])
        maps.append((a, torch.from_numpy(idx.astype(np.int64)).to(s.device)))

    def k(x: torch.Tensor, *_: Any) -> tuple:
        y = x
        for a, idx in maps:
            y = y.index_select(a, idx)
        return (y if y is not x else x.clone(),)  # no pad at all: a copy, not the input

    return k


def _const(s: Static, i: int, what: str) -> np.ndarray:
    c = s.const(i)
    if c is None:
        raise UnsupportedError(f"{what} must be known before the run (a Constant)")
    return c.reshape(-1)


@LOWERINGS.register("DepthToSpace")
def _depth_to_space(s: Static) -> Kernel:
    n, c, h, w = s.inp(0).shape
    b = int(s.attrs["blocksize"])
    out = s.out().shape
    if s.attrs.get("mode", "DCR") == "DCR":  # depth is (b, b, C'): blocks outermost
        split, perm = (n, b, b, c // (b * b), h, w), (0, 3, 4, 1, 5, 2)
    else:  # CRD: depth is (C', b, b)
        split, perm = (n, c // (b * b), b, b, h, w), (0, 1, 4, 2, 5, 3)
    return lambda x: (x.reshape(split).permute(perm).reshape(out),)


@LOWERINGS.register("SpaceToDepth")
def _space_to_depth(s: Static) -> Kernel:
    n, c, h, w = s.inp(0).shape
    b = int(s.attrs["blocksize"])
    out = s.out().shape
    split = (n, c, h // b, b, w // b, b)
    return lambda x: (x.reshape(split).permute(0, 3, 5, 1, 2, 4).reshape(out),)
