"""Series decomposition of a program for the per-op search: segments joined by few values.

The ops that run (live, not constant) form an undirected graph: two ops are joined when
one reads a value the other makes (parameters and constants join nothing). Breadth-first
levels of that graph, from the first op of each connected part, have the property that
every edge joins ops of the same or adjacent levels. Consecutive levels are grouped into
*segments*, cut where few values cross (``max_cross``): in a training step a cut after a
layer is crossed by the layer's activation going forward and its gradient coming back, so
a segment is one layer's forward *and* backward ops, and the search's state between
segments is the placements of those two values only. Because a value's readers are at
most one level from its maker, every crossing value crosses exactly the boundary between
two adjacent segments.

A parameter read in more than one segment (a weight whose gradient is computed in a later
segment than its forward product, a tied embedding) is *global*: it crosses every boundary
from its first reading segment to its last, placed as it is first read.

A segment's ``signature`` describes it by its ops' types, attributes, types and internal
wiring, and the roles of its boundary values in order of first use: never by names, so
equal layers of a deep model have equal signatures and share one search.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from distir.ir.core import Value
from distir.transforms.program import Program
from distir.transforms.spmd.assignment import is_constant_op, is_shape_operand

__all__ = ["Segment", "Decomposition", "decompose"]


@dataclass(frozen=True, eq=False)
class Segment:
    """Ops ``ops`` (indices into ``prog.ops``, program order). ``ext``: the values the
    segment reads and does not make, in order of first use (boundary values, parameters);
    ``made_out``: values made here and read in another segment, in order of making;
    ``signature``: hashable structure (see the module docstring)."""

    ops: tuple[int, ...]
    ext: tuple[Value, ...]
    made_out: tuple[Value, ...]
    signature: tuple


@dataclass(frozen=True, eq=False)
class Decomposition:
    """``segments`` in order; ``boundaries[k]``: the values crossing between segments ``k``
    and ``k+1`` (sorted by their position in the program); ``global_params``: parameters
    read in more than one segment (they are in the boundaries between)."""

    segments: tuple[Segment, ...]
    boundaries: tuple[tuple[Value, ...], ...]
    global_params: frozenset[Value]
    seg_of: dict[int, int]
    """op index -> segment index."""


def _reads(prog: Program, i: int) -> list[Value]:
    op = prog.ops[i]
    return [v for k, v in enumerate(op.inputs) if v is not None and not is_shape_operand(op, k)]


def decompose(prog: Program, max_cross: int = 0, max_ops: int = 64) -> Decomposition:
    """Segments of ``prog`` cut at levels crossed by at most ``limit`` values: ``limit``
    starts at ``max(max_cross, fewest)`` (``fewest``: the smallest crossing anywhere) and
    grows until no segment has more than ``max_ops`` ops (or every level is cut).
    Deterministic."""
    ops = [i for i in prog.live_ops if not is_constant_op(prog, prog.ops[i])]
    made = {v: i for i in ops for v in prog.ops[i].outputs}
    level = _levels(prog, ops, made)
    marks = sorted(set(level.values()))
    rank = {lv: n for n, lv in enumerate(marks)}
    # crossing[c]: values made on one side of the cut after level marks[c] and read on the
    # other
    spans: dict[Value, tuple[int, int]] = {}
    for i in ops:
        for v in _reads(prog, i):
            j = made.get(v)
            if j is None:
                continue
            lo, hi = sorted((rank[level[i]], rank[level[j]]))
            a, b = spans.get(v, (lo, hi))
            spans[v] = (min(a, lo), max(b, hi))
    count = [0] * max(len(marks) - 1, 0)
    for lo, hi in spans.values():
        for c in range(lo, hi):
            count[c] += 1
    limit = max(max_cross, min(count, default=0))
    while True:
        cuts = {c for c in range(len(count)) if count[c] <= limit}
        if limit >= max(count, default=0) or _largest(marks, level, cuts) <= max_ops:
            break
        limit += 1
    seg_of_level: dict[int, int] = {}
    s = 0
    for c, lv in enumerate(marks):
        seg_of_level[lv] = s
        if c in cuts:
            s += 1
    seg_ops: list[list[int]] = [[] for _ in range(s + 1)]
    for i in ops:
        seg_ops[seg_of_level[level[i]]].append(i)
    seg_ops = [o for o in seg_ops if o]
    seg_of = {i: k for k, o in enumerate(seg_ops) for i in o}
    param_segs: dict[Value, set[int]] = {}
    for i in ops:
        for v in _reads(prog, i):
            if v in prog.param_set:
                param_segs.setdefault(v, set()).add(seg_of[i])
    globals_ = frozenset(p for p, ss in param_segs.items() if len(ss) > 1)
    order = {v: n for n, v in enumerate(prog.env)}
    bounds: list[set[Value]] = [set() for _ in range(len(seg_ops) - 1)]
    for i in ops:
        for v in _reads(prog, i):
            j = made.get(v)
            if j is not None and seg_of[j] != seg_of[i]:
                a, b = sorted((seg_of[i], seg_of[j]))
                for c in range(a, b):  # passes through the segments between
                    bounds[c].add(v)
    for v, ss in param_segs.items():  # placed where first read, carried to the last reader
        for c in range(min(ss), max(ss)):
            bounds[c].add(v)
    segments = tuple(_segment(prog, o, seg_of, made, globals_) for o in seg_ops)
    return Decomposition(segments, tuple(tuple(sorted(b, key=order.__getitem__))
                                         for b in bounds), globals_, seg_of)


def _segment(prog: Program, ops: list[int], seg_of: dict[int, int], made: dict[Value, int],
             globals_: frozenset[Value]) -> Segment:
    k = seg_of[ops[0]]
    local = {i: n for n, i in enumerate(ops)}
    ext: dict[Value, int] = {}
    sig: list[tuple] = []
    made_out: list[Value] = []
    for i in ops:
        op = prog.ops[i]
        refs: list[tuple | None] = []
        for v in op.inputs:
            if v is None:
                refs.append(None)
                continue
            c = prog.const(v)
            j = made.get(v)
            if j is not None and seg_of[j] == k:
                refs.append(("i", local[j], prog.ops[j].outputs.index(v)))
            elif c is not None and j is None:
                refs.append(("c", str(prog.type(v)), _digest(c)))
            else:
                n = ext.setdefault(v, len(ext))
                role = "g" if v in globals_ else "p" if v in prog.param_set else "x"
                refs.append(("x", n, role, str(prog.type(v))))
        outs: list[tuple] = []
        for o in op.outputs:
            readers = {seg_of[u] for u in prog.users.get(o, ()) if u in seg_of}
            out_here = bool(readers - {k})
            if out_here:
                made_out.append(o)
            outs.append((str(prog.type(o)), out_here, o in prog.returned))
        sig.append((op.op_type, op.attrs_key, tuple(refs), tuple(outs)))
    return Segment(tuple(ops), tuple(ext), tuple(made_out), tuple(sig))


def _digest(arr: object) -> str:
    import numpy as np

    a = np.asarray(arr)
    return f"{a.dtype}{a.shape}" + hashlib.blake2b(a.tobytes(), digest_size=8).hexdigest()


HUB_READERS = 8
"""A value read by more ops than this (an optimizer's step count, read by every update)
is shared like a parameter: it does not anchor a backward op's level."""


def _levels(prog: Program, ops: list[int], made: dict[Value, int]) -> dict[int, int]:
    """Forward ops (ancestors of every op whose result the program returns) are at their
    program position; every other op (a backward op) at the lowest level of the ops whose
    results it reads, so the backward of a layer meets the forward ops whose activations
    it reads, and levels fall along the backward pass as they rise along the forward."""
    # a returned value computed from parameters alone (an optimizer's step count + 1) has
    # no ancestors to agree on
    sinks = [i for i in ops if any(o in prog.returned for o in prog.ops[i].outputs)
             and any(v in made for v in _reads(prog, i))]
    anc: dict[int, int] = {}  # op -> bitmask of the sinks it reaches
    bit = {s: 1 << n for n, s in enumerate(sinks)}
    for i in reversed(ops):
        m = bit.get(i, 0)
        for o in prog.ops[i].outputs:
            for u in prog.users.get(o, ()):
                m |= anc.get(u, 0)
        anc[i] = m
    full = (1 << len(sinks)) - 1
    level: dict[int, int] = {}
    for i in ops:
        if anc[i] == full:
            level[i] = i
            continue
        srcs = [level[made[v]] for v in _reads(prog, i)
                if v in made and len(prog.users.get(v, ())) <= HUB_READERS]
        level[i] = min(srcs) if srcs else i
    return level


def _largest(marks: list[int], level: dict[int, int], cuts: set[int]) -> int:
    """The most ops in one segment when cutting after the levels ``cuts``."""
    per: dict[int, int] = {}
    for lv in level.values():
        per[lv] = per.get(lv, 0) + 1
    most = run = 0
    for c, lv in enumerate(marks):
        run += per[lv]
        if c in cuts:
            most, run = max(most, run), 0
    return max(most, run)
