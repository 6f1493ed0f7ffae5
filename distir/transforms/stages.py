"""Part of the builder tower (``distir.transforms.tower``, ``dtp`` before the spmd passes).

Stage functions: one function per pipeline stage and phase, called once per microbatch.

``@stage{s}_fwd`` holds the forward ops of stage ``s`` and ``@stage{s}_bwd`` its backward
ops, for all ``tp`` ranks of the stage (rank-major per op, with the tensor-parallel
allreduces). Their parameters are untyped, so one function serves every replica and every
microbatch: the type checker and the simulator see repeated calls with equal argument
types and evaluate the body once.

Parameters, in order of first use, each a block of ``tp`` values (one per rank):
values from other stages or phases (activations received, values stashed by the forward
for the backward), batch inputs, weights, and batch-independent values computed once per
device (constants, local target shapes, the causal mask), deduplicated by value.
Results: every value used outside the function, in definition order. Repeated layers are
calls of shared layer functions (``layers``). With ``K > 1``
microbatches, a function whose results include gradients summed over the batch also has an
``_acc`` variant that takes the running sums and returns them with this microbatch's added.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from distir.ir.core import CALL, Function, Op, Value
from distir.ir.types import DenseAttr
from distir.transforms.emit import Emitter, base_name
from distir.transforms.layers import LayerTable, Segment
from distir.transforms.plan import Plan
from distir.transforms.program import SHAPE_OPERANDS
from distir.transforms.structure import HOIST, MB

__all__ = ["StageFunction", "build_stage_functions", "Input"]

Input = tuple
"""A parameter block: ``("v", value)`` a value of the caller's environment,
``("h", key, value)`` a batch-independent value, ``("c", key, array, name)`` a constant,
``("r", key, array, name)`` one constant per rank (``ConstFn``),
``("acc", value)`` a running sum."""


@dataclass
class StageFunction:
    stage: int
    phase: str
    op_indices: list[int]
    fn: Function | None = None
    acc: Function | None = None
    inputs: list[Input] = field(default_factory=list)
    acc_inputs: list[Input] = field(default_factory=list)
    outputs: list[Value] = field(default_factory=list)
    reduced: list[Value] = field(default_factory=list)
    send_to: dict[Value, list[int]] = field(default_factory=dict)
    """Values of this function needed by other stages' functions: value -> stages."""


def build_stage_functions(plan: Plan, layer_functions: bool = True,
                          ) -> dict[tuple[int, str], StageFunction]:
    """The stage functions of ``plan``, keyed by ``(stage, "F" | "B")``; repeated layers
    become calls of layer functions unless ``layer_functions`` is false."""
    prog, st = plan.prog, plan.st
    groups: dict[tuple[int, str], StageFunction] = {}
    where: dict[int, tuple[int, str]] = {}
    for i in prog.live_ops:
        if st.kind[i] != MB:
            continue
        key = (plan.stage[i], "B" if i in st.backward else "F")
        g = groups.get(key)
        if g is None:
            g = groups[key] = StageFunction(key[0], key[1], [])
        g.op_indices.append(i)
        where[i] = key
    for key, g in groups.items():
        _outputs(plan, g, key, where)
    layers = LayerTable(plan, groups, enabled=layer_functions)
    for key, g in groups.items():
        g.fn, g.inputs = _build(plan, g, layers.segments[key], layers, acc=False)
        if plan.k > 1 and g.reduced:
            g.acc, g.acc_inputs = _build(plan, g, layers.segments[key], layers, acc=True)
    return dict(sorted(groups.items(), key=lambda kv: (kv[0][1] != "F", kv[0][0])))


def _outputs(plan: Plan, g: StageFunction, key: tuple[int, str],
             where: dict[int, tuple[int, str]]) -> None:
    prog, st = plan.prog, plan.st
    for i in g.op_indices:
        for v in prog.ops[i].outputs:
            if v not in prog.live_values:
                continue
            out = v in prog.returned or v in st.reduced
            stages: list[int] = []
            for u in prog.users.get(v, ()):
                w = where.get(u)
                if w == key:
                    continue
                out = True
                if w is not None and w[0] != key[0] and w[0] not in stages:
                    stages.append(w[0])
            if out:
                g.outputs.append(v)
                if v in st.reduced:
                    g.reduced.append(v)
                if stages:
                    g.send_to[v] = sorted(stages)


def _build(plan: Plan, g: StageFunction, segments: list[Segment], layers: LayerTable,
           acc: bool) -> tuple[Function, list[Input]]:
    prog = plan.prog
    tp = plan.written_tp  # the ranks written

    ranks = plan.rank_suffixes()

    def name(b: str) -> list[str]:
        return [b + r for r in ranks]

    params: list[Value] = []
    inputs: list[Input] = []
    env: dict[Value, list[Value]] = {}
    by_key: dict[int, list[Value]] = {}

    def block(hint: str) -> list[Value]:
        vals = [Value(n) for n in name(hint)]
        params.extend(vals)
        return vals

    def const(arr: np.ndarray, hint: str, per_rank: bool = False) -> list[Value]:
        key = plan.const_key(DenseAttr.from_array(arr), per_rank)
        vals = by_key.get(key)
        if vals is None:
            vals = by_key[key] = block(hint)
            inputs.append(("r" if per_rank else "c", key, arr, hint))
        return vals

    prod = prog.producer
    kind = plan.st.kind

    def ensure(v: Value) -> list[Value]:
        """The local values of ``v``, a new parameter block on first use."""
        vals = env.get(v)
        if vals is not None:
            return vals
        j = prod.get(v)
        if j is not None and kind[j] == HOIST:
            key = plan.canon(v)
            vals = by_key.get(key)
            if vals is None:
                vals = by_key[key] = block(base_name(v))
                inputs.append(("h", key, v))
        else:
            vals = block(base_name(v))
            inputs.append(("v", v))
        env[v] = vals
        return vals

    ops: list[Op] = []
    em = Emitter(plan, ops, env, name, const)
    for seg in segments:
        fn = layers.function(seg)
        if fn is None:
            for i in seg.ops:
                op = prog.ops[i]
                for k, v in enumerate(op.inputs):
                    if v is not None and (op.op_type, k) not in SHAPE_OPERANDS:
                        ensure(v)
                em.emit(op)
            continue
        args = [x for ext in seg.externals for x in (
            const(ext[2], ext[3]) if ext[0] == "c" else ensure(ext[-1]))]
        outs = [Value(n) for v in seg.escaping for n in name(base_name(v))]
        ops.append(Op(CALL, args, None, outs, callee=fn))
        for j, v in enumerate(seg.escaping):
            env[v] = outs[j * tp:(j + 1) * tp]
    if acc:
        # Each sum right after the op that computes this microbatch's part (so that a
        # gradient is complete, and may be reduced, as early as the backward allows).
        where = {o: i for i, op in enumerate(ops) for o in op.outputs}
        after: dict[int, list[Op]] = {}
        for v in g.reduced:
            b = base_name(v)
            running = block(b + "_acc")
            inputs.append(("acc", v))
            sums = [Value(n) for n in name(b + "_sum")]
            for t in range(tp):
                after.setdefault(where.get(env[v][t], -1), []).append(
                    Op("Add", [running[t], env[v][t]], None, [sums[t]]))
            env[v] = sums
        ops[:] = [*after.pop(-1, []), *(x for i, op in enumerate(ops)
                                        for x in (op, *after.get(i, ())))]
    rets = [x for v in g.outputs for x in env[v]]
    phase = "fwd" if g.phase == "F" else "bwd"
    fname = f"stage{g.stage}_{phase}" + ("_acc" if acc else "")
    return Function(fname, params, ops, rets), inputs
