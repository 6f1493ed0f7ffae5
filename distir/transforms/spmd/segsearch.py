"""The search inside one segment: the cheapest reads of its ops, for given boundary specs.

Like ``search_small``'s dynamic programming in program order, restricted to one segment
(see ``segments.py``): the state is the spec of every value still to be read in the
segment (and the specs already made of it, which later readers reuse). Values the
segment reads but does not make arrive with *fixed* specs (the previous segment's
choice, ``Replicate`` for a global parameter); a parameter read only here, and a
gradient a later segment makes, are placed as their first reader reads them (the later
segment is *promised* that spec). A value
made here and read by an earlier segment was *promised* a spec: the segment pays the
redistribution from what it makes to the promise. The result maps the specs of the
values made here and read by later segments to the cheapest (cost, reads) reaching them.

Cost (seconds, an additive estimate): each op's local compute by the simulator's cost
rules plus ``Hardware.comm_time`` of each redistribution; a redistribution read by an
optimizer (a weight gradient's all-reduce) overlaps the rest of the backward pass in the
simulator, so it is charged ``overlap_slowdown`` of its time (the compute it slows).
"""

from __future__ import annotations

from typing import Any

from distir.ir.core import Value
from distir.transforms.program import Program
from distir.transforms.spmd.grouped import grouped_shards
from distir.transforms.spmd.mesh import Mesh, Partial, Spec, local_shape, replicated
from distir.transforms.spmd.redistribute import plan
from distir.transforms.spmd.rules import OpRules
from distir.transforms.spmd.search import STATE_UPDATES, _candidates, _Costs, _strategies
from distir.transforms.spmd.segments import Segment, _reads

__all__ = ["SegmentContext", "search_segment"]

Plan = tuple[tuple[Spec | None, ...], ...]
"""The reads of each op of a segment, in the segment's order."""


class SegmentContext:
    """What every segment search on one (program, mesh, hardware) shares, memoized."""

    def __init__(self, prog: Program, mesh: Mesh, hardware: Any, max_states: int) -> None:
        self.prog = prog
        self.mesh = mesh
        self.rules = OpRules(prog, mesh)
        self.grouped = grouped_shards(prog, self.rules)
        self.costs = _Costs(prog, mesh, hardware)
        self.hw = self.costs.hw
        self.max_states = max_states
        self.cands: dict[Value, list[Spec]] = {}
        self.vid = {v: n for n, v in enumerate(prog.env)}
        self.searches = 0

    def candidates(self, v: Value) -> list[Spec]:
        """Specs ``v`` may be read as; a value known before running (an axes list, a
        constant) only whole: the rules take such operands as they are."""
        c = self.cands.get(v)
        if c is None:
            known = self.prog.const(v) is not None
            c = self.cands[v] = [replicated(self.mesh)] if known else \
                _candidates(self.prog.shape(v), self.mesh,
                            self.grouped.get(v, frozenset()))
        return c

    def param_bytes(self, v: Value, spec: Spec) -> int:
        t = self.prog.type(v)
        n = 1
        for d in local_shape(t.shape, spec, self.mesh):
            n *= d
        return n * t.dtype.itemsize

    def redistribution(self, v: Value, src: Spec, dst: Spec, overlapped: bool) -> float:
        secs = self.costs.read(v, src, dst)[1]
        return secs * self.hw.overlap_slowdown if overlapped else secs


Held = tuple[Spec, frozenset]
"""A value's spec as made, and every spec already made of it (later readers reuse them)."""


def search_segment(ctx: SegmentContext, seg: Segment, fixed: dict[Value, Held],
                   promised: dict[Value, Spec], outs: tuple[Value, ...],
                   mem_limit: float, later: tuple[Value, ...] = (),
                   cont: tuple[Value, ...] = (),
                   ) -> dict[tuple[Held, ...], tuple[float, float, Plan]]:
    """``{held of outs, later and cont: (seconds, parameter bytes per device, reads)}`` for
    the cheapest plan of ``seg`` reaching each (see the module docstring). ``fixed`` values
    arrive with the specs made of them so far (a gather made in an earlier segment is not
    paid twice); ``cont``: fixed values read again after this segment. ``later``: values
    a later segment makes and this one reads; each arrives as its first reader here reads
    it (a promise the maker pays for). Plans whose parameters alone exceed ``mem_limit``
    bytes per device are dropped."""
    prog, rules, costs = ctx.prog, ctx.rules, ctx.costs
    ctx.searches += 1
    vid = ctx.vid
    last: dict[Value, int] = {}
    for n, i in enumerate(seg.ops):
        for v in _reads(prog, i):
            last[v] = n
    keep = set(outs) | set(later) | set(cont)
    whole = (replicated(ctx.mesh), frozenset({replicated(ctx.mesh)}))
    start: dict[int, tuple[Spec | None, frozenset]] = {}
    for v in seg.ext:
        if v in fixed:
            start[vid[v]] = fixed[v]
        elif v in prog.param_set or v in keep:
            start[vid[v]] = (None, frozenset())
    states: dict[tuple, tuple[float, float, Any]] = {
        tuple(sorted(start.items(), key=lambda x: x[0])): (0.0, 0.0, None)}
    for n, i in enumerate(seg.ops):
        op = prog.ops[i]
        cands = {v: ctx.candidates(v) for v in _reads(prog, i)}
        strat = _strategies(rules, op, cands)
        held = {vid[x] for x in (op.inputs[j] for _, j in STATE_UPDATES.get(op.op_type, ())
                                 if j < len(op.inputs)) if x is not None}
        overlapped = op.op_type in STATE_UPDATES
        dead = {vid[v] for v in _reads(prog, i) if last.get(v) == n and v not in keep}
        nxt: dict[tuple, tuple[float, float, Any]] = {}
        for key, (cost, mem, back) in states.items():
            have: dict[int, tuple[Spec | None, frozenset]] = dict(key)
            for reads, out in strat:
                secs = costs.op(op, reads, out)
                extra = 0.0
                upd: dict[int, tuple[Spec | None, frozenset]] = {}
                ok = True
                for x, s in zip(op.inputs, reads, strict=True):
                    if s is None or x is None:
                        continue
                    k = vid[x]
                    src, made = upd.get(k) or have.get(k) or whole
                    if src is None:  # a parameter, or a later gradient: placed as read
                        if x in prog.param_set:
                            if any(isinstance(p, Partial) for p in s):
                                ok = False
                                break
                            extra += ctx.param_bytes(x, s)
                        upd[k] = (s, frozenset({s}))
                        continue
                    if any(isinstance(b, Partial) and not isinstance(a, Partial)
                           for a, b in zip(src, s, strict=True)) or (k in held and src != s):
                        ok = False
                        break
                    if s in made:
                        continue
                    secs += ctx.redistribution(x, src, s, overlapped)
                    upd[k] = (src, made | {st.after for st in plan(src, s)})
                if not ok or mem + extra > mem_limit:
                    continue
                for o, s in zip(op.outputs, out.outs, strict=True):
                    want = promised.get(o)
                    if want is not None and want != s:
                        if any(isinstance(b, Partial) and not isinstance(a, Partial)
                               for a, b in zip(s, want, strict=True)):
                            ok = False
                            break
                        secs += ctx.redistribution(o, s, want, False)
                if not ok:
                    continue
                new = {**have, **upd}
                for k in dead:
                    new.pop(k, None)
                for o, s in zip(op.outputs, out.outs, strict=True):
                    if o in last and last[o] > n or o in keep:
                        new[vid[o]] = (s, frozenset({s}))
                nk = tuple(sorted(new.items(), key=lambda x: x[0]))
                c = cost + secs
                old = nxt.get(nk)
                if old is None or c < old[0]:
                    nxt[nk] = (c, mem + extra, (reads, back))
        if len(nxt) > ctx.max_states:
            nxt = dict(sorted(nxt.items(), key=lambda kv: kv[1][0])[:ctx.max_states])
        states = nxt
    result: dict[tuple[Held, ...], tuple[float, float, Plan]] = {}
    for key, (cost, mem, back) in states.items():
        have = dict(key)
        ok_key = tuple(have[vid[o]] for o in outs + later + cont)
        old = result.get(ok_key)  # type: ignore[arg-type]
        if old is None or cost < old[0]:
            reads_list: list[tuple[Spec | None, ...]] = []
            while back is not None:
                r, back = back
                reads_list.append(r)
            result[ok_key] = (cost, mem, tuple(reversed(reads_list)))  # type: ignore[index]
    return result
