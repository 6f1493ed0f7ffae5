"""Lowerings of the communication ops, in their per-rank forms (see
``distir.analysis.projection``), to ``torch.distributed`` collectives.

Every op runs in the process group of its ``group`` attribute (created up front by
``GroupCache``). A ``Send``/``Recv`` pair is a broadcast from the source within the pair's
group: a collective, so its communicator exists before the first step (NCCL builds
point-to-point communicators lazily) and it is matched exactly like every other collective.
Collectives whose participants are listed in an order other than the group's (sorted
ranks) permute their pieces. The all-reduces (``MPIAllreduce``, ``MPIAllreduceBucket``),
``MPIReduceScatter`` and ``MPIAllgather`` are asynchronous (``ASYNC_OPS``): each returns its
work handle, waited for by the first op that reads its result. An input is overwritten
in place only where ``donate`` allows it; otherwise the op works on a copy.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.distributed as dist

from distir.backend.lowering import LOWERINGS, Kernel, Static, as_tensor_type, torch_dtype
from distir.errors import UnsupportedError

# The single-tensor collectives, by their current names (torch >= 2.13) or their former.
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def _pg(s: Static) -> Any:
    if s.groups is None:
        raise UnsupportedError("communication needs process groups: run the program with "
                               "distir.run or a distir.backend.Session")
    return s.groups.get(tuple(s.attrs["group"]))


def _buffer(x: torch.Tensor, donate: bool) -> torch.Tensor:
    """A contiguous tensor holding ``x`` that may be overwritten."""
    if not x.is_contiguous():
        return x.contiguous()
    return x if donate else x.clone()


def _equal_sizes(s: Static) -> None:
    sizes = s.attrs["sizes"]
    if len(set(sizes)) != 1:
        raise UnsupportedError(f"pieces of unequal sizes {list(sizes)} along axis "
                               f"{s.attrs['axis']}; the backend gathers equal pieces only")


@LOWERINGS.register("Send", comm=True)
def _send(s: Static) -> Kernel:
    pg, me = _pg(s), s.rank

    def k(x: torch.Tensor) -> tuple:
        dist.broadcast(x.contiguous(), src=me, group=pg)
        return ()

    return k


@LOWERINGS.register("Recv", comm=True)
def _recv(s: Static) -> Kernel:
    pg, src, t = _pg(s), int(s.attrs["device"]), s.out()

    def k() -> tuple:
        buf = s.empty(t)
        dist.broadcast(buf, src=src, group=pg)
        return (buf,)

    return k


@LOWERINGS.register("MPIAllreduce", comm=True, asynchronous=True)
def _allreduce(s: Static) -> Kernel:
    pg, donate = _pg(s), s.donate[0]

    def k(x: torch.Tensor) -> tuple:
        buf = _buffer(x, donate)
        return (buf, dist.all_reduce(buf, group=pg, async_op=True))

    return k


@LOWERINGS.register("MPIAllreduceBucket", comm=True, asynchronous=True)
def _allreduce_bucket(s: Static) -> Kernel:
    """The members flattened into one buffer (``torch.cat``), one ``all_reduce`` of it, and
    the results as views of their pieces of it (filled in place when the collective ends;
    the program waits for it before their first reader). One member: no copy."""
    pg = _pg(s)
    shapes = [as_tensor_type(t).shape for t in s.out_types]
    if len(shapes) == 1:
        donate = s.donate[0]

        def one(x: torch.Tensor) -> tuple:
            buf = _buffer(x, donate)
            return (buf, dist.all_reduce(buf, group=pg, async_op=True))

        return one
    sizes = [math.prod(sh) for sh in shapes]

    def k(*xs: torch.Tensor) -> tuple:
        flat = torch.cat([x.reshape(-1) for x in xs])
        work = dist.all_reduce(flat, group=pg, async_op=True)
        return (*(p.view(sh) for p, sh in zip(flat.split(sizes), shapes)), work)

    return k


class _Pending:
    """A work handle that also keeps the collective's input buffers alive until it ends
    (or, with no work, a collective already done)."""

    __slots__ = ("work", "keep")

    def __init__(self, work: Any, *keep: Any) -> None:
        self.work, self.keep = work, keep

    def wait(self) -> None:
        if self.work is not None:
            self.work.wait()
        self.keep = ()


@LOWERINGS.register("MPIAllgather", comm=True, asynchronous=True)
def _allgather(s: Static) -> Kernel:
    """Asynchronous where the gathered buffer is the result (in group order along axis 0);
    otherwise the pieces are permuted once they arrive, so it completes before returning
    (a handle that is already done)."""
    pg = _pg(s)
    _equal_sizes(s)
    group, order, axis = tuple(s.attrs["group"]), tuple(s.attrs["order"]), s.attrs["axis"]
    in_t, out_t = s.inp(0), s.out()
    n = len(group)
    if order == group and axis == 0:
        def direct(x: torch.Tensor) -> tuple:
            out = s.empty(out_t)
            x = x.contiguous()
            return (out, _Pending(_all_gather_single(out, x, group=pg, async_op=True), x))

        return direct
    pos = [group.index(d) for d in order]
    stacked = in_t.with_shape((n,) + in_t.shape)

    def permuted(x: torch.Tensor) -> tuple:
        buf = s.empty(stacked)
        _all_gather_single(buf.view(-1), x.contiguous().view(-1), group=pg)
        return (torch.cat([buf[j] for j in pos], dim=axis), _Pending(None))

    return permuted


@LOWERINGS.register("MPIReduceScatter", comm=True, asynchronous=True)
def _reduce_scatter(s: Static) -> Kernel:
    pg = _pg(s)
    group, order, axis = tuple(s.attrs["group"]), tuple(s.attrs["order"]), s.attrs["axis"]
    out_t, n = s.out(), len(group)
    if order == group and axis == 0:
        def direct(x: torch.Tensor) -> tuple:
            out = s.empty(out_t)
            x = x.contiguous()
            return (out, _Pending(_reduce_scatter_single(out, x, group=pg, async_op=True), x))

        return direct
    shard_of = [order.index(d) for d in group]  # the shard group rank j receives

    def permuted(x: torch.Tensor) -> tuple:
        chunks = x.chunk(n, dim=axis)
        out = s.empty(out_t)
        pieces = [chunks[i].contiguous() for i in shard_of]
        return (out, _Pending(dist.reduce_scatter(out, pieces, group=pg, async_op=True),
                              pieces))

    return permuted


@LOWERINGS.register("MPIBroadcast", comm=True, view=True)
def _broadcast(s: Static) -> Kernel:
    pg, root = _pg(s), int(s.attrs["root"])
    if s.rank == root:
        keep = bool(s.out_types)

        def send(x: torch.Tensor) -> tuple:
            dist.broadcast(x.contiguous(), src=root, group=pg)
            return (x,) if keep else ()

        return send
    t = s.out()

    def recv() -> tuple:
        buf = s.empty(t)
        dist.broadcast(buf, src=root, group=pg)
        return (buf,)

    return recv


@LOWERINGS.register("MPIScatter", comm=True)
def _scatter(s: Static) -> Kernel:
    pg, root = _pg(s), int(s.attrs["root"])
    group, devices, axis = tuple(s.attrs["group"]), tuple(s.attrs["devices"]), s.attrs["axis"]
    if s.rank == root:
        n = len(devices)
        keep = bool(s.out_types)
        # The shard each group rank receives (the root, when not a destination, gets a
        # throwaway copy of shard 0).
        shard_of = [devices.index(d) if d in devices else 0 for d in group]

        def send(x: torch.Tensor) -> tuple:
            chunks = x.chunk(n, dim=axis)
            pieces = [chunks[i].contiguous() for i in shard_of]
            out = torch.empty_like(pieces[group.index(root)])
            dist.scatter(out, pieces, src=root, group=pg)
            return (out,) if keep else ()

        return send
    t = s.out()

    def recv() -> tuple:
        out = s.empty(t)
        dist.scatter(out, None, src=root, group=pg)
        return (out,)

    return recv


@LOWERINGS.register("MPIGather", comm=True)
def _gather(s: Static) -> Kernel:
    pg, dst = _pg(s), int(s.attrs["device"])
    _equal_sizes(s)
    group, order, axis = tuple(s.attrs["group"]), tuple(s.attrs["order"]), s.attrs["axis"]
    if s.rank != dst:
        def send(x: torch.Tensor) -> tuple:
            dist.gather(x.contiguous(), None, dst=dst, group=pg)
            return ()

        return send
    out_t = s.out()
    piece = list(out_t.shape)
    piece[axis] = s.attrs["sizes"][0]
    piece_t = out_t.with_shape(tuple(piece))
    pos = [group.index(d) for d in order]

    def recv(*xs: torch.Tensor) -> tuple:
        mine = xs[0].contiguous() if xs else s.empty(piece_t)
        pieces = [s.empty(piece_t) for _ in group]
        dist.gather(mine, pieces, dst=dst, group=pg)
        return (torch.cat([pieces[j] for j in pos], dim=axis),)

    return recv


@LOWERINGS.register("MPIReduce", comm=True)
def _reduce(s: Static) -> Kernel:
    pg, dst = _pg(s), int(s.attrs["device"])
    donate = bool(s.donate) and s.donate[0]
    if s.rank != dst:
        def send(x: torch.Tensor) -> tuple:
            dist.reduce(_buffer(x, donate), dst=dst, group=pg)
            return ()

        return send
    t = s.out()

    def recv(*xs: torch.Tensor) -> tuple:
        if xs:
            buf = _buffer(xs[0], donate)
        else:
            buf = torch.zeros(t.shape, dtype=torch_dtype(t.dtype), device=s.device)
        dist.reduce(buf, dst=dst, group=pg)
        return (buf,)

    return recv
