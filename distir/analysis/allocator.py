"""What PyTorch's caching allocator reserves for a device's program: the liveness model's
tensors served block by block, so that fragmentation shows.

Liveness (``distir.analysis.memory``) counts the bytes of the live values: what the
allocator has handed out. A device needs more: a freed block stays mapped for later
requests, and a request that no free block holds grows the segment at its end, so the
device holds the high-water mark of a segment whose free space may be in pieces too
small for the next request, until, out of pages, it unmaps the free ones. A GPT-2 350M
training step on an H200 ran out of memory where its liveness peak (135.7 GiB) was below
what the card offers tensors: its softmax backward held one more attention tensor than
the liveness counts, and the pages it needed were not there even after that release (see
``docs/fidelity.md``).

``allocator_reserve(fn)`` replays each device's program (``project``) through a model of
the allocator as the backend runs it (``expandable_segments:True``, one stream):

- sizes are rounded up to 512 bytes; requests of at most 1 MiB go to the small pool, the
  others to the large pool; each pool is one segment mapped in pages of 2 MiB (small) or
  20 MiB (large);
- a request takes the smallest free block that holds it (the lowest address among equal
  sizes), the free block at the segment's end counting as the largest (it can grow into
  the unmapped rest); the rest of the block stays a free block of its own when it is at
  least 512 bytes;
- when no other free block holds a request, the end block serves it, grown by whole pages
  as needed (or a new one at the end);
- a freed block merges with its free neighbours; its pages stay mapped;
- given a ``limit`` (``near_capacity`` gives the card's room less ``MARGIN``), a request
  whose pages would take the mapped bytes over it first unmaps every page that no live
  block touches, in both pools, and retries (PyTorch's ``release_cached_blocks``, its
  last resort when mapping fails: ``release_available_cached_blocks`` does nothing unless
  ``max_split_size_mb`` is set, and ``garbage_collection_threshold`` is off by default;
  ``ExpandableSegment::unmap`` frees only the whole pages inside a free block); the
  replay runs out of memory when even that leaves too few pages;
- the parameters are allocated first, in order; then, per op, its results in order, and
  then its dead inputs and unused results are freed (the liveness model's order); an op
  of ``TRANSIENT_INPUT`` first allocates a temporary the size of its first input, freed
  once its results are allocated; a ``SoftmaxGrad`` allocates, after its result, a
  temporary the size of its gradient input (``TRANSIENT_AFTER``);
- a result the backend computes as a view (``VIEW_OPS``, of the same element type as the
  op's first input) holds no block of its own: it keeps its base's block alive until the
  base and its views are all dead; but a ``Transpose`` that the backend makes contiguous
  (``copied_transpose``: one that moves a batch axis, or the last axis of unaligned rows)
  is a copy, and so is a ``Reshape`` or ``Flatten`` that no view of its input's strides
  gives (``layout.view_strides``: grouped-query attention's keys repeated over the query
  heads, a broadcast merged with another axis; a reshape of a ``Slice`` of steps above 1,
  whose strides its steps multiply) and a ``Slice`` of steps not all positive:
  the replay follows each value's strides as the simulator's liveness does
  (``memory.MAYBE_VIEWS``). (Such reshapes were views here, and the replay held less than
  the liveness peak: Qwen2's and Llama's steps at 1% from a cap were taken to fit, and
  ran out, ``grid_search/results/heldout_1gpu``.)

After a release, placement stays best fit over the free blocks as if they were mapped,
mapping the pages a block needs; PyTorch serves a request from its mapped free pieces,
else maps the lowest unmapped hole with room for it: the two can differ after a release.
Checked against the allocator's histories (``grid_search/results/memtrace_2gpu``, calls 3
and 4): both steps released 2.2-2.4 GiB of free pages inside the backward's first
``SoftmaxGrad``; GPT-2 1.6B (batch 92, P2 K2) then held 136.98 GiB and ran, GPT-2 350M
(batch 140, P2 K2) needed 137.98 GiB of live blocks, over what the card offered, and ran
out.

Not modelled: other temporaries inside ops, copies that kernels make of non-contiguous
operands, results written in place into a donated input, blocks of communication
streams, and memory outside the allocator (``Hardware.reserved_bytes``). Checked against
the allocator's own counts per op on 2 x H200 (``calibration.memory_trace``,
``grid_search/results/memtrace_2gpu``).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from distir.ir.core import Function, Module, Value
from distir.ir.types import DType, TensorType

__all__ = ["Reserve", "Verdict", "allocator_reserve", "replay", "near_capacity",
           "VIEW_OPS", "NEAR_CAPACITY", "MARGIN", "COMMUNICATORS_NEAR"]

VIEW_OPS = frozenset({"Cast", "CastLike", "Dropout", "Expand", "Flatten", "Identity",
                      "MPIBroadcast", "Reshape", "Slice", "Split", "Squeeze", "Transpose",
                      "Unsqueeze"})
"""Ops whose results the PyTorch backend may compute as views of their first input (its
lowerings registered with ``view=True``; a test keeps the two equal)."""

TRANSIENT_INPUT = frozenset({"SoftmaxCrossEntropyLoss"})
"""Ops whose kernels hold a temporary the size of their first input while they run (the
loss's log-softmax of the logits), measured as such by ``calibration.memory_trace``."""
TRANSIENT_AFTER = {"SoftmaxGrad": 1}
"""Ops whose kernels allocate, once their result is allocated, a temporary the size of
the input named (PyTorch's softmax backward on CUDA writes the product of the gradient
and the softmax into a tensor of its own before reducing it), freed within the op;
measured by ``calibration.memory_trace``: 2.19 and 1.44 GiB, one attention tensor, at every
``SoftmaxGrad`` of GPT-2 350M and 1.6B."""

def _copied_transpose(op: Any) -> bool:
    """Whether ``op`` is a ``Transpose`` that the backend computes as a contiguous copy."""
    if op.op_type != "Transpose" or not op.inputs or op.inputs[0] is None:
        return False
    from distir.analysis.cost.compute import copied_transpose

    t = op.inputs[0].type
    shape, dtype = getattr(t, "shape", None), getattr(t, "dtype", None)
    return shape is not None and dtype is not None and \
        copied_transpose(tuple(shape), dtype.itemsize, op.attrs.get("perm"))


NEAR_CAPACITY = 0.90
"""``near_capacity`` replays the devices whose liveness peak is at least this fraction of
the capacity: the liveness must never be so far below what a run holds that a device
which runs out of memory escapes the replay. The largest replayed reserve over its
liveness peak in the studies was 3.8%, the largest measured 1.7%; since the liveness
counts views as their storage (``memory.VIEW_ALIASES``), the sealed studies' peaks were
up to 6.5% above it (Hiera-B's pipelines, whose parts of one storage, its q, k and v, the
liveness counts apart) and 8.6% (DeBERTa-v2's replayed rows, measured with an older
backend; its eager step today within 0.4%), ``grid_search/results/elementwise_order``.
Replaying costs a projection of the program."""
MARGIN = 0.004
"""``near_capacity`` takes a device to fit only when its reserve leaves this fraction of
its capacity free (0.55 GiB of an H200's 137 GiB): the replay's largest error on the
traced steps (0.43 GiB), rounded up, so that the filter errs towards out of memory."""
SMALL_REQUEST = 1 << 20
"""Requests of at most this many bytes are served from the small pool."""
SMALL_PAGE = 2 << 20
LARGE_PAGE = 20 << 20


@dataclass(frozen=True, slots=True)
class Reserve:
    """One device: the most bytes its live tensors held at once (the liveness peak, in
    the allocator's rounded sizes) and the most bytes its segments mapped."""

    allocated_bytes: int
    """The most bytes of live blocks at once (views holding none of their own)."""
    reserved_bytes: int
    """The most bytes mapped at once; for a replay that ran out of memory, what it
    needed mapped at the request that failed."""
    out_of_memory: bool = False
    """Whether a request found too few pages within the replay's ``limit``, even once
    the free pages were unmapped (never without a limit)."""


class _Block:
    __slots__ = ("addr", "size", "free", "prev", "next")

    def __init__(self, addr: int, size: int, prev: _Block | None) -> None:
        self.addr = addr
        self.size = size
        self.free = True
        self.prev = prev
        self.next: _Block | None = None


class _Segment:
    """One expandable segment: its blocks in address order, its free ones by size, and
    its pages: those mapped and, per page, how many live blocks touch it."""

    def __init__(self, page: int, keep_rest: int) -> None:
        self.page = page
        self.keep_rest = keep_rest  # the least remainder split off as a block of its own
        self.free: list[tuple[int, int]] = []  # (size, addr), sorted
        self.at: dict[int, _Block] = {}  # free blocks by address
        self.last: _Block | None = None
        self.mapped = 0  # the extent of the blocks: every page below it was mapped once
        self.pages: set[int] = set()  # the pages mapped now
        self.use: dict[int, int] = {}  # page -> the live blocks touching it

    def _span(self, b: _Block) -> range:
        return range(b.addr // self.page, (b.addr + b.size - 1) // self.page + 1)

    def unmapped_bytes(self, b: _Block) -> int:
        """The bytes of the pages that ``b`` touches and that are not mapped."""
        return sum(p not in self.pages for p in self._span(b)) * self.page

    def hold(self, b: _Block) -> None:
        """``b`` is live: its pages are mapped (those that were not, now)."""
        for p in self._span(b):
            self.use[p] = self.use.get(p, 0) + 1
            self.pages.add(p)

    def drop(self, b: _Block) -> None:
        """``b`` is about to be freed: its pages stay mapped."""
        for p in self._span(b):
            k = self.use[p] - 1
            if k:
                self.use[p] = k
            else:
                del self.use[p]

    def unmap_free(self) -> None:
        """Unmap every page that no live block touches (the whole pages of the free
        blocks)."""
        self.pages = {p for p in self.pages if p in self.use}

    @property
    def mapped_bytes(self) -> int:
        return len(self.pages) * self.page

    def _take(self, b: _Block) -> None:
        del self.free[bisect_left(self.free, (b.size, b.addr))]
        del self.at[b.addr]

    def _give(self, b: _Block) -> None:
        insort(self.free, (b.size, b.addr))
        self.at[b.addr] = b

    def alloc(self, size: int) -> _Block:
        # The free block at the end can grow into the segment's unmapped rest: best fit
        # counts it as the largest, so it serves only what no other free block holds.
        i = bisect_left(self.free, (size, -1))
        last = self.last
        if i < len(self.free) and last is not None and last.free and \
                self.free[i][1] == last.addr:
            i += 1
        if i < len(self.free):
            b = self.at[self.free[i][1]]
            self._take(b)
        else:  # the end block, grown as much as needed
            if last is not None and last.free:
                self._take(last)
                grow = max(0, -(-(size - last.size) // self.page) * self.page)
                last.size += grow
                b = last
            else:
                grow = -(-size // self.page) * self.page
                b = _Block(self.mapped, grow, last)
                if last is not None:
                    last.next = b
                self.last = b
            self.mapped += grow
        b.free = False
        rest = b.size - size
        if rest >= self.keep_rest:
            r = _Block(b.addr + size, rest, b)
            r.next = b.next
            if b.next is not None:
                b.next.prev = r
            b.next = r
            b.size = size
            if self.last is b:
                self.last = r
            self._give(r)
        return b

    def _absorb(self, a: _Block, b: _Block) -> None:
        """Block ``a`` takes in ``b``, the block after it."""
        a.size += b.size
        a.next = b.next
        if b.next is not None:
            b.next.prev = a
        if self.last is b:
            self.last = a

    def release(self, b: _Block) -> None:
        b.free = True
        n = b.next
        if n is not None and n.free:
            self._take(n)
            self._absorb(b, n)
        p = b.prev
        if p is not None and p.free:
            self._take(p)
            self._absorb(p, b)
            b = p
        self._give(b)


class _OutOfMemory(Exception):
    pass


def replay(fn: Function, trace: list[tuple[int, int]] | None = None,
           limit: int | None = None, sm_count: int = 0) -> Reserve:
    """``Reserve`` of one device's flat program (a ``RankProgram``'s function: every value
    typed, on one device), by the model in the module's docstring. ``trace``, when given,
    receives per op the bytes allocated and mapped once its dead inputs are freed.
    ``limit``: the bytes the allocator may map (what the card offers it); a request that
    would map more unmaps the free pages and retries, and the replay stops, out of memory,
    when that is not enough. Without it, pages are never unmapped. ``sm_count``: the
    device's multiprocessors (a profile's ``sm_count``), by which a reduction's kernel
    allocates its staging buffer while it runs (``memory.staged_bytes``); 0: none."""

    small = _Segment(SMALL_PAGE, 512)
    large = _Segment(LARGE_PAGE, 512)
    block: dict[Value, tuple[_Segment, _Block]] = {}
    root: dict[Value, Value] = {}  # a view -> the value owning its block
    refs: dict[Value, int] = {}
    live = peak = reserved = 0

    def alloc(v: Value) -> None:
        nonlocal live, peak, reserved
        t = v.type
        n = t.size_bytes if t is not None else 0
        if n <= 0:
            return
        n = -(-n // 512) * 512
        seg = small if n <= SMALL_REQUEST else large
        b = seg.alloc(n)
        if limit is not None:
            need = small.mapped_bytes + large.mapped_bytes + seg.unmapped_bytes(b)
            if need > limit:  # the allocator's last resort: unmap every free page, retry
                small.unmap_free()
                large.unmap_free()
                need = small.mapped_bytes + large.mapped_bytes + seg.unmapped_bytes(b)
                if need > limit:
                    reserved = max(reserved, need)
                    raise _OutOfMemory
        seg.hold(b)
        reserved = max(reserved, small.mapped_bytes + large.mapped_bytes)
        block[v] = (seg, b)
        refs[v] = 1
        live += n
        if live > peak:
            peak = live

    def release(v: Value | None) -> None:
        nonlocal live
        if v is None:
            return
        r = root.get(v, v)
        k = refs.get(r)
        if k is None:
            return
        if k > 1:
            refs[r] = k - 1
            return
        del refs[r]
        seg, b = block.pop(r)
        live -= b.size
        seg.drop(b)
        seg.release(b)

    try:
        _run(fn, alloc, release, block, root, refs, trace,
             lambda: (live, small.mapped_bytes + large.mapped_bytes), sm_count)
    except _OutOfMemory:
        return Reserve(max(peak, live), reserved, out_of_memory=True)
    return Reserve(peak, reserved)


def _run(fn: Function, alloc: Any, release: Any, block: dict, root: dict[Value, Value],
         refs: dict[Value, int], trace: list[tuple[int, int]] | None, now: Any,
         sm_count: int = 0) -> None:
    """``replay``'s walk over the program: its allocations and frees, in order."""
    from distir.analysis.layout import (
        contiguous_strides,
        slice_steps_by_axis,
        strides_through,
        view_strides,
    )
    from distir.analysis.memory import STAGED_REDUCE, liveness, staged_in_program
    from distir.analysis.numpy_rules.onnx_ops import constant_value

    for p in fn.params:
        alloc(p)
    lv = liveness(fn).ops
    # The strides (elements) of the views made so far (others are contiguous), by which a
    # reshape is a view or a copy, as the backend finds it.
    strided: dict[Value, tuple[int, ...]] = {}
    constants = {op.outputs[0]: op for op in fn.ops
                 if op.op_type == "Constant" and len(op.outputs) == 1}

    def known(v: Value | None) -> Any:
        """``v``'s value where a ``Constant`` gives it (a ``Slice``'s axes and steps)."""
        c = constants.get(v) if v is not None else None
        try:
            return None if c is None else constant_value(c.attrs)
        except (TypeError, ValueError):
            return None

    def view_of_strides(op: Any, x: Value, out: Any) -> tuple[int, ...] | None:
        """The strides of ``op``'s result as a view of ``x``, or ``None`` for a copy."""
        t_in = x.type
        if not isinstance(t_in, TensorType) or not isinstance(out, TensorType) or \
                not all(isinstance(d, int) for d in (*t_in.shape, *out.shape)):
            return ()  # (not known: a view, as before)
        shape, oshape = tuple(t_in.shape), tuple(out.shape)
        st = strided.get(x)
        if st is None:
            st = contiguous_strides(shape)
        t = op.op_type
        if t in ("Reshape", "Flatten"):
            return view_strides(shape, st, oshape) if shape != oshape else st
        by_axis = None
        if t == "Slice" and len(op.inputs) > 4 and op.inputs[4] is not None:
            by_axis = slice_steps_by_axis(len(shape), known(op.inputs[3]),
                                          known(op.inputs[4]))
            if by_axis and min(by_axis.values()) < 1:
                return None  # (an index_select: a copy)
        if t in ("Split", "Slice", "Expand", "Transpose", "Squeeze", "Unsqueeze"):
            return strides_through(op, shape, st, t_in.dtype.itemsize, oshape, by_axis)
        return st
    consts = constants if sm_count and any(op.op_type in STAGED_REDUCE for op in fn.ops) \
        else {}
    for op in fn.ops:
        if op.callee is not None:
            from distir.errors import SimulationError

            raise SimulationError(f"@{fn.name} calls @{op.callee.name}: the allocator replays "
                                  "one device's flat program (allocator_reserve projects "
                                  "one)")
        src = op.inputs[0] if op.inputs else None
        temp = None
        if op.op_type in TRANSIENT_INPUT and src is not None and src.type is not None:
            temp = Value("temporary", src.type)
            alloc(temp)
        view_of = src if op.op_type in VIEW_OPS and src is not None and \
            src.type is not None and not _copied_transpose(op) else None
        for v in op.outputs:
            out = v.type
            if view_of is not None and out is not None and \
                    getattr(out, "dtype", None) == getattr(view_of.type, "dtype", None):
                r = root.get(view_of, view_of)
                vs = view_of_strides(op, view_of, out) if r in refs else None
                if vs is not None:
                    root[v] = r
                    refs[r] += 1
                    if vs and vs != contiguous_strides(tuple(getattr(out, "shape", ()))):
                        strided[v] = vs
                    continue
            alloc(v)
        if temp is not None:
            release(temp)
        staged = staged_in_program(op, consts, sm_count) if consts else 0
        if staged and src is not None and src.type is not None:
            temp = Value("staging", TensorType(DType.Int8, (staged,),
                                               src.type.devices[0]))  # type: ignore[union-attr]
            alloc(temp)
            release(temp)
        after = TRANSIENT_AFTER.get(op.op_type)
        if after is not None and len(op.inputs) > after and op.inputs[after] is not None \
                and op.inputs[after].type is not None:  # type: ignore[union-attr]
            temp = Value("temporary", op.inputs[after].type)  # type: ignore[union-attr]
            alloc(temp)
            release(temp)
        _, free_in, _, free_out, _, _ = lv[op]
        for i in free_in:
            release(op.inputs[i])
        for i in free_out:
            release(op.outputs[i])
        if trace is not None:
            trace.append(now())


def allocator_reserve(fn: Function | Module, input_types: Sequence[Any] | None = None,
                      ) -> dict[int, Reserve]:
    """Per device of ``fn``, what the caching allocator would hold (``Reserve``): its
    program projected (``distir.analysis.projection.project``) and replayed. A device
    runs out of memory when ``reserved_bytes`` exceeds what its card offers tensors
    (``Hardware.usable_memory_bytes``)."""
    from distir.analysis.projection import project

    proj = project(fn, input_types)
    return {p.device: replay(p.fn) for p in proj.programs if p.fn.ops or p.fn.params}


@dataclass(frozen=True, slots=True)
class Verdict:
    """``near_capacity``'s answer: whether every device's reserve fits what it offers,
    and the device with the least room (``reserve - capacity`` largest)."""

    fits: bool
    device: int
    reserve: Reserve
    capacity: int
    replayed: bool = True
    """``False`` when the liveness peak alone is over every capacity (``reserve`` then
    holds that peak)."""


COMMUNICATORS_NEAR = 4
"""The communicators a rank is taken to join before its program is projected (its
tensor-parallel and data-parallel groups and its two pipeline neighbours): ranks whose
peak is near the capacity that many communicators leave are replayed."""


def near_capacity(fn: Any, peak_bytes: dict[int, int], hardware: Any,
                  world_size: int | None = None, limit: int | None = None,
                  ) -> Verdict | None:
    """For a program whose liveness peaks (``peak_bytes`` per device) come within
    ``NEAR_CAPACITY`` of what a device offers tensors: whether every device's replay
    (``replay``), limited to its capacity less ``MARGIN``, runs without running out of
    memory, the capacity being
    the card's memory less what lies outside the allocator on that rank
    (``Hardware.reserved_for``: the world's communicator and one per device group it
    communicates in, of a ``world_size``-device run; by default as many devices as
    ``peak_bytes`` names), and at most ``limit`` when the allocator is capped. The verdict
    names the device with the least room. ``None`` for a program farther from the
    capacity; one over every capacity the model allows does not fit (not replayed).
    ``fn`` may be a ``ReplicaProgram``: its replica 0 is replayed (the others run alike),
    joining the replicas' groups too."""
    worst = max(peak_bytes.values(), default=0)
    if not peak_bytes:
        return None
    n = world_size if world_size is not None else max(peak_bytes) + 1
    mem = hardware.memory_bytes

    def room(communicators: int) -> int:
        cap = mem - hardware.reserved_for(n, communicators)
        return cap if limit is None else min(cap, limit)

    high = room(0)  # a rank in no communicator of its own
    low = min(hardware.usable_memory_bytes if limit is None else limit,
              room(COMMUNICATORS_NEAR))
    if worst < NEAR_CAPACITY * low:
        return None
    if worst > high:  # over what any rank is offered: no replay needed
        d = max(peak_bytes, key=lambda k: peak_bytes[k])
        return Verdict(False, d, Reserve(worst, worst), high, replayed=False)
    from distir.analysis.projection import project
    from distir.analysis.replicas import REPLICA_OPS

    prog = getattr(fn, "fn", fn)  # a ReplicaProgram's replica 0
    near = [d for d, b in peak_bytes.items() if b >= NEAR_CAPACITY * low]
    proj = project(prog, devices=near)  # (the programs of the devices replayed below)
    # One communicator per distinct device group (the backend's GroupCache).
    groups = {tuple(sorted(g)) for g in proj.groups}
    for f in (prog, *prog.reachable()):  # a replica program's all-reduces over every
        for op in f.ops:                   # replica (inside stage and layer functions too)
            if op.op_type in REPLICA_OPS:
                groups.add(tuple(sorted(op.attrs["devices"])))  # type: ignore[arg-type]
    verdicts = []
    for p in proj.programs:
        if not (p.fn.ops or p.fn.params) or \
                peak_bytes.get(p.device, worst) < NEAR_CAPACITY * low:
            continue  # (a device far below the capacity is not replayed)
        cap = room(sum(p.device in g for g in groups))
        # (the libraries' workspaces are allocator blocks the replayed program does not
        # name: its tensors have the rest)
        r = replay(p.fn, limit=int(cap * (1 - MARGIN)) - hardware.workspace_held,
                   sm_count=hardware.sm_count)
        verdicts.append(Verdict(not r.out_of_memory, p.device, r, cap))
    if not verdicts:
        return None
    least = max(verdicts, key=lambda v: v.reserve.reserved_bytes - v.capacity * (1 - MARGIN))
    return Verdict(all(v.fits for v in verdicts), least.device, least.reserve,
                   least.capacity)
