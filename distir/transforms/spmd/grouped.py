"""Which values the search may place in interleaved groups (``Shard(d, groups=g)``).

Offering every value every grouped shard would double the candidates; offering none misses
attention split by heads (a fused QKV projection is ``Shard(1, groups=3)``: each device
keeps its heads of q, k and v). The grouped shards a program can use are found from the
rules alone, structurally (op kinds, shapes and dataflow, never names):

1. **Seeds**: an op that refuses an input split on dimension ``d`` and says it would run
   on ``g`` interleaved groups (the layout rules' ``Reject(groups=g)``: a ``Split`` into
   ``g`` equal parts along the split axis, a ``Gather`` of one of ``g`` fused parts) seeds
   ``(d, g)`` on that input.
2. **Closure**: from a value with ``(d, g)``, every reader run on it (the other inputs
   replicated, or as a rule demands: a bias split alike) gives its grouped inputs and
   results; and its producer, for each single input split (in ``g`` groups or not) that
   makes the value exactly ``Shard(d, groups=g)``, gives its grouped inputs. Repeated to a
   fixed point.

On a GPT-2 layer this yields the attention projection's product, bias, weight (and its
update), the fused ``qkv`` value, and in a training step the gradient of ``qkv`` (the
``Concat`` of q, k and v's), its ``ReduceSum`` and ``Reshape`` to the bias gradient, and
the weight gradient: nothing in the MLP block. Each probe is one mesh axis at a time, the
others replicated; the facts are ``(dimension, groups)`` pairs, which the search combines
with the other placements of every mesh axis.
"""

from __future__ import annotations

from distir.ir.core import Op, Value
from distir.transforms.program import Program
from distir.transforms.spmd.assignment import is_constant_op, is_shape_operand
from distir.transforms.spmd.mesh import Placement, R, Shard, Spec, check_spec
from distir.transforms.spmd.rules import NotLocal, OpRules, Outcome

__all__ = ["grouped_shards"]

Facts = dict[Value, frozenset[tuple[int, int]]]


def grouped_shards(prog: Program, rules: OpRules) -> Facts:
    """``{value: {(dimension, groups), ...}}`` for every value the search may read or make
    as ``Shard(dimension, groups=groups)`` (see the module docstring); values absent have
    none."""
    mesh = rules.mesh
    axes = [a for a in range(mesh.ndim) if mesh.shape[a] > 1]
    ops = [prog.ops[i] for i in prog.live_ops if not is_constant_op(prog, prog.ops[i])]
    readers: dict[Value, list[Op]] = {}
    for op in ops:
        for k, v in enumerate(op.inputs):
            if _placeable(prog, op, k):
                readers.setdefault(v, []).append(op)  # type: ignore[arg-type]
    facts: dict[Value, set[tuple[int, int]]] = {}
    work: list[Op] = []
    queued: set[Op] = set()
    memo: dict[tuple, tuple[list[Spec | None], Outcome] | NotLocal] = {}
    sigs: dict[Op, tuple] = {}

    def run(op: Op, k: int, a: int, p: Placement) -> tuple[list[Spec | None], Outcome] | NotLocal:
        # the rules read op kinds, attributes, shapes and known values only: repeated layers
        # share one probe
        sig = sigs.get(op)
        if sig is None:
            sig = sigs[op] = _signature(prog, op)
        key = (sig, k, a, p)
        hit = memo.get(key)
        if hit is None:
            hit = memo[key] = _run(rules, op, k, a, p)
        return hit

    def add(v: Value, d: int, g: int) -> None:
        if g <= 1 or (d, g) in facts.get(v, ()):
            return
        if all(check_spec(prog.shape(v), _one(mesh.ndim, a, Shard(d, g)), mesh) is not None
               for a in axes):
            return
        facts.setdefault(v, set()).add((d, g))
        prod = prog.producer_op(v)
        for op in ([prod] if prod is not None else []) + readers.get(v, []):
            if op not in queued:
                queued.add(op)
                work.append(op)

    def learn(op: Op, reads: list[Spec | None], out: Outcome, a: int) -> None:
        for v, s in zip(op.inputs, reads, strict=True):
            p = None if s is None else s[a]
            if v is not None and isinstance(p, Shard):
                add(v, p.dim, p.groups)
        for o, s in zip(op.outputs, out.outs, strict=True):
            p = s[a]
            if isinstance(p, Shard) and o in readers:
                add(o, p.dim, p.groups)

    for op in ops:  # 1. seeds: the rules' own requests for interleaved groups
        for k, v in enumerate(op.inputs):
            if not _placeable(prog, op, k):
                continue
            for a in axes:
                for d in range(len(prog.shape(v))):  # type: ignore[arg-type]
                    got = run(op, k, a, Shard(d))
                    if isinstance(got, NotLocal) and got.groups and got.groups > 1:
                        g = got.groups
                        again = run(op, k, a, Shard(d, g))
                        if not isinstance(again, NotLocal):
                            learn(op, again[0], again[1], a)
    while work:  # 2. closure through readers and producers
        op = work.pop()
        queued.discard(op)
        for k, v in enumerate(op.inputs):  # forward: run on a grouped input
            if not _placeable(prog, op, k):
                continue
            for d, g in sorted(facts.get(v, ())):  # type: ignore[arg-type]
                for a in axes:
                    got = run(op, k, a, Shard(d, g))
                    if not isinstance(got, NotLocal):
                        learn(op, got[0], got[1], a)
        for j, o in enumerate(op.outputs):  # backward: what makes a grouped result
            for d, g in sorted(facts.get(o, ())):
                for a in axes:
                    for k, v in enumerate(op.inputs):
                        if not _placeable(prog, op, k):
                            continue
                        for dd in range(len(prog.shape(v))):  # type: ignore[arg-type]
                            for gg in (1, g):
                                got = run(op, k, a, Shard(dd, gg))
                                if not isinstance(got, NotLocal) and \
                                        got[1].outs[j][a] == Shard(d, g):
                                    learn(op, got[0], got[1], a)
    return {v: frozenset(s) for v, s in facts.items()}


def _placeable(prog: Program, op: Op, k: int) -> bool:
    """Whether input ``k`` of ``op`` is a tensor the search places (not a shape operand,
    not a value known before running)."""
    v = op.inputs[k]
    return v is not None and not is_shape_operand(op, k) and prog.const(v) is None


def _signature(prog: Program, op: Op) -> tuple:
    """What the rules read of ``op``: its kind, attributes, the shapes of its inputs and
    results and the inputs' known values."""
    ins: list[tuple | None] = []
    for v in op.inputs:
        if v is None:
            ins.append(None)
            continue
        c = prog.const(v)
        ins.append((prog.shape(v), None if c is None else (str(c.dtype), c.tobytes())))
    return (op.op_type, op.attrs_key, tuple(ins), tuple(prog.shape(o) for o in op.outputs))


def _one(ndim: int, axis: int, p: Placement) -> Spec:
    return tuple(p if a == axis else R for a in range(ndim))


def _run(rules: OpRules, op: Op, k: int, axis: int,
         p: Placement) -> tuple[list[Spec | None], Outcome] | NotLocal:
    """``op`` with input ``k`` placed ``p`` on ``axis`` and the others replicated, changed
    as the rules demand (at most once per input); its reads and outcome, or the refusal."""
    prog, mesh = rules.prog, rules.mesh
    rep = _one(mesh.ndim, axis, R)
    reads: list[Spec | None] = [
        None if not _placeable(prog, op, i) and (op.inputs[i] is None
                                                 or is_shape_operand(op, i)) else rep
        for i in range(len(op.inputs))]
    reads[k] = _one(mesh.ndim, axis, p)
    for _ in range(len(op.inputs) + 1):
        try:
            return reads, rules.apply(op, tuple(reads))
        except NotLocal as e:
            if e.demand is None:
                return e
            i, a, want = e.demand
            if i == k or a != axis or reads[i] != rep or not _placeable(prog, op, i):
                return e
            reads[i] = _one(mesh.ndim, axis, want)
    return NotLocal(f"{op.op_type}: demands do not settle")
