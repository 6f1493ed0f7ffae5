"""Part of the builder tower (``distir.transforms.tower``, ``dtp`` before the spmd passes).

Layer functions: the repeated layers of the stage functions, written once.

The ops of a stage function fall in *segments*, maximal runs of ops of one layer (one
anchor, see ``structure``). Two segments are the same layer when their ops match one for
one: op types, attributes, where each input comes from (an earlier op of the segment, or
the segment's n-th distinct outside value), which results are all-reduced, and which
values leave the segment. Such a layer becomes a generic function ``@layer{r}_fwd`` (or
``_bwd``), named after its lowest occurrence ``r`` and shared by all stages; each stage
function then calls it once per layer. GPT-2 175B's 48 blocks per stage are 48 calls of
one function: the simulator and the type checker evaluate one block per distinct argument
types, and the program holds one copy of a block's ops.

Outside values are the segment's parameters, in order of first use: activations of earlier
segments, weights, batch-independent values (deduplicated like the stage functions') and
local target shapes. A segment with a loss (whose ``mean`` scaling needs a constant of its
own) or of a single op is left inline.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from distir.ir.core import Function, Op, Value
from distir.ir.types import DenseAttr
from distir.transforms.emit import Emitter, base_name, local_group, scaled_outputs
from distir.transforms.layout import T
from distir.transforms.plan import Plan
from distir.transforms.program import SHAPE_OPERANDS
from distir.transforms.structure import HOIST
from distir.transforms.vocab_parallel import is_vocab_parallel

__all__ = ["Segment", "LayerTable"]


@dataclass
class Segment:
    """One layer's ops in a stage function, with its structural key."""

    ops: list[int]
    anchor: int
    key: tuple = ()
    externals: list[tuple] = field(default_factory=list)
    """``("v", value)``, ``("h", canon key, value)`` or ``("c", const key, array, name)``."""
    escaping: list[Value] = field(default_factory=list)
    aliases: dict[Value, int] = field(default_factory=dict)
    """Batch-independent values read by the segment -> their external's index (values with
    one canonical key, such as two equal constants, share one external)."""


class LayerTable:
    """The segments of every stage function of a plan and the layer functions of those
    that occur at least twice."""

    def __init__(self, plan: Plan, groups: dict, enabled: bool = True) -> None:
        self.plan = plan
        self.segments: dict[tuple[int, str], list[Segment]] = {}
        self.functions: dict[tuple, Function] = {}
        counts: Counter[tuple] = Counter()
        for gkey, g in groups.items():
            outputs = set(g.outputs)
            segs = [self._segment(run, outputs) for run in _runs(plan, g.op_indices)]
            self.segments[gkey] = segs
            counts.update(s.key for s in segs if s.key)
        first: dict[tuple, tuple[int, str]] = {}  # the lowest layer of each repeated key
        for gkey in groups:
            for s in self.segments[gkey]:
                if enabled and s.key and counts[s.key] > 1:
                    a = max(s.anchor - 1, 0)
                    if s.key not in first or a < first[s.key][0]:
                        first[s.key] = (a, "fwd" if gkey[1] == "F" else "bwd")
        self._names = {k: f"layer{a}_{phase}" for k, (a, phase) in first.items()}

    def function(self, seg: Segment) -> Function | None:
        """The layer function of ``seg``, or ``None`` when it stays inline."""
        name = self._names.get(seg.key)
        if name is None:
            return None
        fn = self.functions.get(seg.key)
        if fn is None:
            fn = self.functions[seg.key] = self._build(seg, name)
        return fn

    def _segment(self, run: list[int], group_outputs: set[Value]) -> Segment:
        plan = self.plan
        prog, partial, tp = plan.prog, plan.sh.partial, plan.tp
        seg = Segment(run, plan.st.anchor[run[0]])
        internal: dict[Value, tuple[int, int]] = {}
        ext_ids: dict[tuple, int] = {}
        items = []
        plain = len(run) > 1
        for pos, i in enumerate(run):
            op = prog.ops[i]
            if scaled_outputs(plan, op) or is_vocab_parallel(plan, op):
                plain = False  # constants of its own (a mean's scale, a rank's rows)
            ins: list[tuple | None] = []
            for k, v in enumerate(op.inputs):
                if v is None:
                    ins.append(None)
                    continue
                if (op.op_type, k) in SHAPE_OPERANDS:
                    arr = plan.shape_operand(op, k)
                    ck = plan.const_key(DenseAttr.from_array(arr))
                    dkey: tuple = ("c", ck)
                    ext: tuple = ("c", ck, arr, v.name or f"{base_name(op.outputs[0])}.shape")
                elif v in internal:
                    ins.append(("i",) + internal[v])
                    continue
                else:
                    j = prog.producer.get(v)
                    if j is not None and plan.st.kind[j] == HOIST:
                        cv = plan.canon(v)
                        dkey, ext = ("h", cv), ("h", cv, v)
                    else:
                        dkey, ext = ("v", v), ("v", v)
                idx = ext_ids.get(dkey)
                if idx is None:
                    idx = ext_ids[dkey] = len(seg.externals)
                    seg.externals.append(ext)
                if dkey[0] == "h":
                    seg.aliases[v] = idx
                ins.append(("e", idx))
            outs = tuple((o.name == "_", tp > 1 and T in partial.get(o, "") and
                          o in prog.live_values) for o in op.outputs)
            cut = (tuple(plan.sh.sliced.get((op, k)) for k in range(len(op.inputs)))
                   if plan.sh.sliced else (),  # weights sliced on use (``Sharding.sliced``)
                   local_group(plan, op) if op.op_type in ("Conv", "ConvGrad") else None)
            items.append((op.op_type, op.attrs_key, tuple(ins), outs, cut))
            for k, o in enumerate(op.outputs):
                internal[o] = (pos, k)
        inside = set(run)
        for i in run:
            for o in prog.ops[i].outputs:
                if o in group_outputs or any(u not in inside for u in prog.users.get(o, ())):
                    seg.escaping.append(o)
        if plain:
            seg.key = (tuple(items), tuple(internal[o] for o in seg.escaping))
        return seg

    def _build(self, seg: Segment, fname: str) -> Function:
        plan = self.plan
        ranks = plan.rank_suffixes()
        params: list[Value] = []
        env: dict[Value, list[Value]] = {}
        consts: dict[int, list[Value]] = {}
        blocks: list[list[Value]] = []
        for ext in seg.externals:
            hint = ext[3] if ext[0] == "c" else base_name(ext[-1])
            vals = [Value(hint + r) for r in ranks]
            params.extend(vals)
            blocks.append(vals)
            if ext[0] == "c":
                consts[ext[1]] = vals
            else:
                env[ext[-1]] = vals
        for v, idx in seg.aliases.items():
            env[v] = blocks[idx]
        ops: list[Op] = []
        em = Emitter(plan, ops, env, lambda b: [b + r for r in ranks],
                     lambda arr, hint, per_rank=False:
                     consts[plan.const_key(DenseAttr.from_array(arr), per_rank)])
        for i in seg.ops:
            em.emit(plan.prog.ops[i])
        return Function(fname, params, ops, [x for v in seg.escaping for x in env[v]])


def _runs(plan: Plan, op_indices: list[int]) -> list[list[int]]:
    """``op_indices`` cut into maximal runs of one anchor."""
    runs: list[list[int]] = []
    last = None
    anchor = plan.st.anchor
    for i in op_indices:
        a = anchor[i]
        if a != last:
            runs.append([])
            last = a
        runs[-1].append(i)
    return runs
