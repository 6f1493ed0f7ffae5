"""How a data-parallel step synchronises its gradients: ``synchronize(fn, strategy)``.

A data-parallel program (``dtp(step, dp=D)``) sums each gradient over its ``D`` replicas with
one ``MPIAllreduce`` right after the op that completes it, then every replica runs the same
optimizer update. ``synchronize`` rewrites those all-reduces by a *strategy*, a JSON-able
dict (docs/synchronization.md):

- a builder by name: ``{"builder": "per-gradient" | "ddp" | "merge-all" | "chunk" | "ps" |
  "ps-lb" | "zero-1" | "zero-2", ...}`` (options ``bucket_bytes``, ``first_bucket_bytes``,
  ``k``, ``device``, ``compress``);
- a bucket size: ``{"bucket_bytes": N}`` (greedy buckets in gradient-readiness order);
- one entry per gradient: ``{"variables": [{"sync": "allreduce", "group": g}, {"sync":
  "ps", "device": d}, {"sync": "zero", "stage": 1 | 2}, ...]}``, each optionally with
  ``"compress": "fp16" | "bf16"``.

Gradients are found structurally, never by name: an ``MPIAllreduce`` of the entry function's
top level whose every result is read only by optimizer ops (``OPTIMIZERS``) as their
gradient (input 1), one per replica. They are numbered in *readiness order*: the order of
their all-reduces in the program, which is the order the backward pass completes them.

Invariants of the result (the differential tests check them with the reference executor):
the same parameters and results as ``fn``; the updated weights equal ``fn``'s (exactly for
all-reduce buckets, PS and ZeRO up to the order of float sums; within 16-bit precision with
compression) provided, as data parallelism keeps them, every replica holds the same weights
and optimizer state. An all-reduce group becomes one ``MPIAllreduceBucket`` issued where its
last member's all-reduce was (when that gradient is ready); PS reduces to the server
(``MPIReduce``), updates there and broadcasts every optimizer result; ZeRO-2 reduce-scatters
the gradient along axis 0, updates each replica's shard and all-gathers the results
(ZeRO-1 all-reduces the gradient and updates the shard of it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from distir.analysis.api import type_env
from distir.analysis.values import type_of
from distir.errors import TransformError
from distir.ir.core import Function, Module, Op, Value
from distir.ir.types import DType, TensorType

__all__ = ["OPTIMIZERS", "BUILDERS", "Gradient", "VarSync", "gradients", "resolve",
           "synchronize", "dumps_strategy", "DDP_BUCKET_BYTES", "DDP_FIRST_BUCKET_BYTES"]

OPTIMIZERS = frozenset({"SGDOptimizer", "AdamOptimizer"})
"""Optimizer ops: elementwise in the weight (input 0), the gradient at input 1."""
VIEWS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})
"""Ops that may stand between a gradient's all-reduce and its optimizer (a view of the sum
is the sum of the views)."""

BUILDERS = ("per-gradient", "ddp", "merge-all", "chunk", "ps", "ps-lb", "zero-1", "zero-2")
DDP_BUCKET_BYTES = 25 * 1024 * 1024
"""``torch.nn.parallel.DistributedDataParallel``'s default ``bucket_cap_mb`` (25 MiB)."""
DDP_FIRST_BUCKET_BYTES = 1024 * 1024
"""DDP caps its first bucket (the first gradients ready) at 1 MiB so that communication
starts early."""

_COMPRESS = {"fp16": DType.Float16, "bf16": DType.BFloat16}
_KINDS = ("allreduce", "ps", "zero")


@dataclass(frozen=True, slots=True)
class Gradient:
    """One gradient of a data-parallel program: its all-reduce (``fn.ops[pos]``) and the
    optimizer op of each replica reading its result, in the all-reduce's input order.
    ``type`` is replica 0's gradient type; ``weight`` the name of replica 0's weight (for
    display only)."""

    index: int
    pos: int
    allreduce: Op
    updates: tuple[Op, ...]
    type: TensorType
    devices: tuple[int, ...]
    weight: str
    sharded: frozenset[int] = frozenset()
    """Inputs of the optimizer op shaped like the weight (besides the gradient): what ZeRO
    splits. Every optimizer result must be shaped like the weight too."""
    views: tuple[tuple[Op, ...], ...] = ()
    """Per replica, the view ops (``VIEWS``) between the all-reduce's result and the
    optimizer's gradient input (a bias gradient reshaped), in order; often empty."""
    ready: int = -1
    """Position of the last of the all-reduce and its views: where the rewritten program
    sends the gradient (views commute with the sum, so they move before it)."""

    @property
    def targets(self) -> tuple[Value, ...]:
        """Per replica, the value its optimizer reads as the summed gradient."""
        return tuple(v[-1].outputs[0] if v else r
                     for v, r in zip(self.views, self.allreduce.outputs))

    @property
    def nbytes(self) -> int:
        """Bytes of one replica's gradient."""
        return self.type.size_bytes


@dataclass(frozen=True, slots=True)
class VarSync:
    """How one gradient travels. ``kind``: ``"allreduce"`` (in bucket ``group``: gradients
    of one group share one collective), ``"ps"`` (reduced to and updated on ``device``, the
    results broadcast) or ``"zero"`` (``stage`` 1 or 2); ``compress``: ``None``, ``"fp16"``
    or ``"bf16"`` (the gradient is cast before its communication and back after)."""

    kind: str = "allreduce"
    group: int = 0
    device: int = 0
    stage: int = 2
    compress: str | None = None

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"sync": self.kind}
        if self.kind == "allreduce":
            d["group"] = self.group
        elif self.kind == "ps":
            d["device"] = self.device
        else:
            d["stage"] = self.stage
        if self.compress:
            d["compress"] = self.compress
        return d


# -- finding the gradients --------------------------------------------------------------

def _entry(fn: Function | Module) -> Function:
    return fn.entry if isinstance(fn, Module) else fn


def gradients(fn: Function | Module) -> tuple[Gradient, ...]:
    """The gradient all-reduces of ``fn``'s entry function, in readiness order."""
    fn = _entry(fn)
    readers: dict[Value, list[tuple[Op, int]]] = {}
    for op in fn.ops:
        for i, v in enumerate(op.inputs):
            if v is not None:
                readers.setdefault(v, []).append((op, i))
    returned = set(fn.returns)
    found: list[tuple[int, Op, tuple[Op, ...], tuple[tuple[Op, ...], ...]]] = []
    where = {id(op): i for i, op in enumerate(fn.ops)}
    for pos, op in enumerate(fn.ops):
        if op.op_type != "MPIAllreduce" or len(op.inputs) < 2:
            continue
        updates: list[Op] = []
        views: list[tuple[Op, ...]] = []
        for r in op.outputs:
            chain: list[Op] = []
            rs = readers.get(r, [])
            while len(rs) == 1 and rs[0][1] == 0 and rs[0][0].op_type in VIEWS \
                    and r not in returned:
                chain.append(rs[0][0])
                r = rs[0][0].outputs[0]
                rs = readers.get(r, [])
            if r in returned or len(rs) != 1 or rs[0][1] != 1 \
                    or rs[0][0].op_type not in OPTIMIZERS:
                break
            updates.append(rs[0][0])
            views.append(tuple(chain))
        else:
            found.append((pos, op, tuple(updates), tuple(views)))
    if not found:
        raise TransformError(f"@{fn.name} has no gradient all-reduce (an MPIAllreduce at "
                             "its top level whose results only optimizer ops read): "
                             "synchronize takes a data-parallel training step, e.g. "
                             "dtp(step, dp=2)")
    env = type_env(fn)
    out: list[Gradient] = []
    for idx, (pos, op, ups, chains) in enumerate(found):
        ts = [type_of(env[v]) for v in op.inputs if v is not None]
        g0 = ups[0].inputs[1]
        assert g0 is not None
        t0 = type_of(env[g0])
        assert isinstance(t0, TensorType)
        w = ups[0].inputs[0]
        shaped = frozenset(i for i, x in enumerate(ups[0].inputs) if i != 1 and x is not None
                           and getattr(type_of(env[x]), "shape", None) == t0.shape)
        if any(getattr(type_of(env[o]), "shape", None) != t0.shape for o in ups[0].outputs):
            shaped = frozenset()  # (not shardable: ZeRO refuses it)
        out.append(Gradient(idx, pos, op, ups, t0,
                            tuple(t.device for t in ts if isinstance(t, TensorType)),
                            (w.name or "?") if w is not None else "?", shaped, chains,
                            max([pos] + [where[id(c)] for v in chains for c in v])))
    return tuple(out)


# -- strategies -------------------------------------------------------------------------

def _int(d: Mapping[str, Any], key: str, default: int | None, where: str, lo: int = 0) -> int:
    v = d.get(key, default)
    if not isinstance(v, int) or isinstance(v, bool) or v < lo:
        raise TransformError(f"{where}: {key} must be an int >= {lo}, got {v!r}")
    return v


def _compress(d: Mapping[str, Any], where: str, default: str | None = None) -> str | None:
    c = d.get("compress", default)
    if c is not None and c not in _COMPRESS:
        raise TransformError(f"{where}: compress must be one of {sorted(_COMPRESS)} or "
                             f"null, got {c!r}")
    return c


def _greedy(grads: Sequence[Gradient], cap: int, first_cap: int | None = None) -> list[int]:
    """Bucket ids, filled in readiness order: a bucket closes once it holds at least its
    cap (DDP's rule; ``first_cap`` for the first bucket)."""
    groups: list[int] = []
    g, size = 0, 0
    for gr in grads:
        groups.append(g)
        size += gr.nbytes
        if size >= (first_cap if g == 0 and first_cap is not None else cap):
            g, size = g + 1, 0
    return groups


def _allreduce(groups: Sequence[int], compress: str | None) -> tuple[VarSync, ...]:
    return tuple(VarSync("allreduce", group=g, compress=compress) for g in groups)


def _builder(grads: Sequence[Gradient], s: Mapping[str, Any]) -> tuple[VarSync, ...]:
    name = s["builder"]
    where = f"builder {name!r}"
    comp = _compress(s, where)
    n = len(grads)
    if name == "per-gradient":
        return _allreduce(range(n), comp)
    if name == "ddp":
        cap = _int(s, "bucket_bytes", DDP_BUCKET_BYTES, where, 1)
        first = _int(s, "first_bucket_bytes", DDP_FIRST_BUCKET_BYTES, where, 1)
        return _allreduce(_greedy(grads, cap, first), comp)
    if name == "merge-all":
        return _allreduce([0] * n, comp)
    if name == "chunk":
        k = _int(s, "k", None, where, 1)
        return _allreduce([i // k for i in range(n)], comp)
    if name == "ps":
        dev = _int(s, "device", grads[0].devices[0], where)
        return tuple(VarSync("ps", device=dev, compress=comp) for _ in grads)
    if name == "ps-lb":  # AutoDist's load-balanced PS: each variable on the least loaded
        load = {d: 0 for d in grads[0].devices}
        out = []
        for gr in grads:
            dev = min(load, key=lambda d: (load[d], d))
            load[dev] += gr.nbytes
            out.append(VarSync("ps", device=dev, compress=comp))
        return tuple(out)
    if name in ("zero-1", "zero-2"):
        stage = int(name[-1])
        return tuple(VarSync("zero", stage=stage, compress=comp)
                     if gr.sharded and gr.type.rank
                     and gr.type.shape[0] % len(gr.devices) == 0
                     else VarSync("allreduce", group=n + i, compress=comp)
                     for i, gr in enumerate(grads))
    raise TransformError(f"unknown builder {name!r}: use one of {', '.join(BUILDERS)}")


def _entry_sync(e: Any, i: int, gr: Gradient, comp: str | None) -> VarSync:
    where = f"variables[{i}] (the gradient of %{gr.weight})"
    if not isinstance(e, Mapping):
        raise TransformError(f"{where}: expected an object such as {{\"sync\": "
                             f"\"allreduce\", \"group\": 0}}, got {e!r}")
    kind = e.get("sync", "allreduce")
    unknown = set(e) - {"sync", "group", "device", "stage", "compress"}
    if unknown:
        raise TransformError(f"{where}: unknown keys {sorted(unknown)}; an entry takes "
                             "sync, group, device, stage, compress")
    c = _compress(e, where, comp)
    if kind == "allreduce":
        return VarSync("allreduce", group=_int(e, "group", i, where), compress=c)
    if kind == "ps":
        return VarSync("ps", device=_int(e, "device", gr.devices[0], where), compress=c)
    if kind == "zero":
        stage = _int(e, "stage", 2, where, 1)
        if stage not in (1, 2):
            raise TransformError(f"{where}: stage must be 1 or 2, got {stage}")
        return VarSync("zero", stage=stage, compress=c)
    raise TransformError(f"{where}: sync must be one of {', '.join(_KINDS)}, got {kind!r}")


def resolve(fn: Function | Module | Sequence[Gradient], strategy: Mapping[str, Any],
            ) -> tuple[VarSync, ...]:
    """The per-gradient plan of ``strategy`` (see the module docstring)."""
    grads = gradients(fn) if isinstance(fn, (Function, Module)) else tuple(fn)
    if not isinstance(strategy, Mapping):
        raise TransformError(f"a strategy is a JSON object such as {{\"builder\": \"ddp\"}}, "
                             f"got {strategy!r}")
    known = {"builder", "bucket_bytes", "first_bucket_bytes", "k", "device", "compress",
             "variables"}
    unknown = set(strategy) - known
    if unknown:
        raise TransformError(f"strategy: unknown keys {sorted(unknown)}; it takes "
                             f"{', '.join(sorted(known))}")
    if "builder" in strategy:
        return _builder(grads, strategy)
    comp = _compress(strategy, "strategy")
    if "variables" in strategy:
        vs = strategy["variables"]
        if not isinstance(vs, Sequence) or isinstance(vs, str) or len(vs) != len(grads):
            n = len(vs) if isinstance(vs, Sequence) else "not a list"
            raise TransformError(f"strategy: variables must list one entry per gradient, "
                                 f"{len(grads)} in readiness order, got {n}")
        return tuple(_entry_sync(e, i, gr, comp) for i, (e, gr) in enumerate(zip(vs, grads)))
    if "bucket_bytes" in strategy:
        cap = _int(strategy, "bucket_bytes", None, "strategy", 1)
        return _allreduce(_greedy(grads, cap), comp)
    raise TransformError("strategy: give a builder, bucket_bytes or variables, e.g. "
                         "{\"builder\": \"ddp\"}")


# -- rewriting --------------------------------------------------------------------------

def _name(v: Value | None, suffix: str) -> str:
    return f"{v.name if v is not None else 'v'}_{suffix}"


def _check(grads: Sequence[Gradient], plan: Sequence[VarSync], pos: Mapping[int, int]) -> None:
    """A plan the rewrite can apply: servers hold replicas, ZeRO shards divide, buckets
    hold one dtype and are read only after their last member is ready."""
    world = set(grads[0].devices)
    groups: dict[int, list[int]] = {}
    for gr, p in zip(grads, plan):
        where = f"gradient {gr.index} (of %{gr.weight})"
        if set(gr.devices) != world:
            raise TransformError(f"{where} is reduced over devices {sorted(gr.devices)}, "
                                 f"gradient 0 over {sorted(world)}: synchronize takes one "
                                 "data-parallel group")
        if p.kind == "allreduce":
            groups.setdefault(p.group, []).append(gr.index)
        elif p.kind == "ps" and p.device not in gr.devices:
            raise TransformError(f"{where}: device {p.device} holds no replica; a parameter "
                                 f"server must be one of {sorted(gr.devices)}")
        elif p.kind == "zero":
            d = len(gr.devices)
            if not gr.type.rank or gr.type.shape[0] % d:
                raise TransformError(f"{where}: ZeRO shards axis 0 over {d} replicas but "
                                     f"the gradient is {gr.type.shape}: use all-reduce for it")
            if not gr.sharded:
                raise TransformError(f"{where}: its optimizer ({gr.updates[0].op_type}) has "
                                     "results not shaped like the weight, so ZeRO cannot "
                                     "shard it: use all-reduce for it")
    for g, ms in groups.items():
        m0 = grads[ms[0]]
        dt0 = _COMPRESS.get(plan[ms[0]].compress or "", m0.type.dtype)
        for i in ms:
            gr = grads[i]
            if gr.devices != m0.devices:
                raise TransformError(f"group {g}: gradients {ms[0]} and {i} list their "
                                     "replicas in different orders; bucket them apart")
            dt = _COMPRESS.get(plan[i].compress or "", gr.type.dtype)
            if dt != dt0:
                raise TransformError(f"group {g}: gradient {i} travels as {dt.value} but "
                                     f"gradient {ms[0]} as {dt0.value}; a bucket holds "
                                     "one dtype: compress both alike or bucket them apart")
        last = max(grads[i].ready for i in ms)
        first_use = min(pos[id(u)] for i in ms for u in grads[i].updates)
        if first_use < last:
            raise TransformError(f"group {g}: an update reads a gradient's sum (op "
                                 f"{first_use}) before gradient {ms[-1]} is ready (op "
                                 f"{last}): bucket only gradients whose updates come after "
                                 "all of them")


def synchronize(fn: Function | Module, strategy: Mapping[str, Any] | Sequence[VarSync],
                ) -> Function:
    """``fn`` (a data-parallel training step) with its gradients synchronised by
    ``strategy``: a strategy dict (module docstring) or a resolved plan, one ``VarSync``
    per gradient in readiness order. Raises ``TransformError`` for a strategy that does
    not fit the program."""
    f = _entry(fn)
    grads = gradients(f)
    if isinstance(strategy, Mapping):
        plan = resolve(grads, strategy)
    else:
        plan = tuple(strategy)
        if len(plan) != len(grads) or not all(isinstance(p, VarSync) for p in plan):
            raise TransformError(f"a plan lists one VarSync per gradient ({len(grads)} "
                                 "here), in readiness order")
    return _Rewrite(f, grads, plan).run()


class _Rewrite:
    """The entry function's op list rewritten by a checked plan: an all-reduce group at
    its last member's all-reduce, a PS or ZeRO reduction at the gradient's all-reduce and
    its update at the first replica's optimizer op (the other replicas' are dropped)."""

    def __init__(self, f: Function, grads: tuple[Gradient, ...],
                 plan: tuple[VarSync, ...]) -> None:
        self.f, self.grads, self.plan = f, grads, plan
        self.pos = {id(op): i for i, op in enumerate(f.ops)}
        _check(grads, plan, self.pos)
        self.ops: list[Op] = []
        self.sent: dict[int, list[Value]] = {}  # gradient -> what each replica sends

    def op(self, op_type: str, ins: Sequence[Value | None], attrs: dict[str, Any] | None,
           names: Sequence[str] | None = None, outs: Sequence[Value] | None = None,
           ) -> tuple[Value, ...]:
        if outs is None:
            outs = [Value(nm) for nm in names or ()]
        self.ops.append(Op(op_type, ins, attrs, outs))
        return tuple(outs)

    def run(self) -> Function:
        f, grads, plan = self.f, self.grads, self.plan
        at_reduce = {g.ready: g for g in grads}
        at_update: dict[int, Gradient] = {}
        skip = {self.pos[id(c)] for g in grads for v in g.views for c in v} | {
            g.pos for g in grads}
        last_of: dict[int, int] = {}
        members: dict[int, list[Gradient]] = {}
        for gr, p in zip(grads, plan):
            if p.kind == "allreduce":
                members.setdefault(p.group, []).append(gr)
                last_of[p.group] = max(gr.ready, last_of.get(p.group, -1))
            else:
                ups = sorted(self.pos[id(u)] for u in gr.updates)
                at_update[ups[0]] = gr
                skip.update(ups[1:])
        reduced: dict[int, tuple[Value, ...]] = {}
        for i, op in enumerate(f.ops):
            red = at_reduce.get(i)
            if red is not None:
                gr, p = red, plan[red.index]
                xs = [self.view(v, chain) for v, chain in zip(gr.allreduce.inputs, gr.views)]
                to = _COMPRESS.get(p.compress or "")
                if to is not None:
                    xs = [self.op("Cast", [x], {"to": to}, [_name(x, str(p.compress))])[0]
                          for x in xs]
                self.sent[gr.index] = xs
                if p.kind != "allreduce":
                    reduced[gr.index] = self.reduce(gr, p)
                elif last_of[p.group] == i:
                    self.bucket(members[p.group])
                continue
            upd = at_update.get(i)
            if upd is not None:
                if plan[upd.index].kind == "ps":
                    self.ps_update(upd, plan[upd.index], reduced[upd.index])
                else:
                    self.zero_update(upd, reduced[upd.index])
                continue
            if i not in skip:
                self.ops.append(op)
        out = Function(f.name, f.params, self.ops, f.returns, f.return_types, f.loc,
                       f.end_loc)
        out.initializers = dict(f.initializers)
        return out

    def view(self, x: Value | None, chain: tuple[Op, ...]) -> Value:
        """``x`` (a replica's unreduced gradient) through that replica's view ops."""
        assert x is not None
        for c in chain:
            x = self.op(c.op_type, (x, *c.inputs[1:]), dict(c.attrs),
                        [_name(c.outputs[0], "local")])[0]
        return x

    def bucket(self, grads: list[Gradient]) -> None:
        """One collective for the group (``MPIAllreduce`` for a lone gradient), its
        results cast back where compressed, bound to the original all-reduce results."""
        ins: list[Value] = []
        outs: list[Value] = []
        backs: list[tuple[Value, Value, DType]] = []
        for gr in grads:
            comp = self.plan[gr.index].compress
            ins.extend(self.sent[gr.index])
            for r in gr.targets:
                if comp:
                    tmp = Value(_name(r, comp))
                    backs.append((tmp, r, gr.type.dtype))
                    outs.append(tmp)
                else:
                    outs.append(r)
        if len(grads) == 1:
            self.op("MPIAllreduce", ins, None, outs=outs)
        else:
            self.op("MPIAllreduceBucket", ins, {"tensors": len(grads)}, outs=outs)
        for tmp, r, dt in backs:
            self.op("Cast", [tmp], {"to": dt}, outs=[r])

    def reduce(self, gr: Gradient, p: VarSync) -> tuple[Value, ...]:
        """PS: the sum on the server; ZeRO-2: each replica's shard of the sum; ZeRO-1:
        each replica's shard of the all-reduced sum. Cast back where compressed."""
        xs = self.sent[gr.index]
        rs = gr.targets
        n = len(xs)
        outs: tuple[Value, ...]
        if p.kind == "ps":
            outs = self.op("MPIReduce", xs, {"device": p.device}, [_name(rs[0], "ps")])
        elif p.stage == 2:
            outs = self.op("MPIReduceScatter", xs, {"axis": 0},
                           [_name(r, "shard") for r in rs])
        else:
            sums = self.op("MPIAllreduce", xs, None, [_name(r, "sum") for r in rs])
            outs = tuple(self.op("Split", [s], {"axis": 0, "num_outputs": n},
                                 [_name(s, f"part{k}") for k in range(n)])[j]
                         for j, s in enumerate(sums))
        if p.compress:
            outs = tuple(self.op("Cast", [o], {"to": gr.type.dtype}, [_name(o, "dec")])[0]
                         for o in outs)
        return outs

    def ps_update(self, gr: Gradient, p: VarSync, reduced: tuple[Value, ...]) -> None:
        """The server's optimizer op on the sum, each of its results broadcast to every
        replica (bound to that replica's original optimizer results)."""
        up = gr.updates[gr.devices.index(p.device)]
        ins = list(up.inputs)
        ins[1] = reduced[0]
        new = self.op(up.op_type, ins, dict(up.attrs), [_name(o, "ps") for o in up.outputs])
        for k, v in enumerate(new):
            self.op("MPIBroadcast", [v], {"devices": gr.devices},
                    outs=[u.outputs[k] for u in gr.updates])

    def zero_update(self, gr: Gradient, shards: tuple[Value, ...]) -> None:
        """Each replica updates its shard (the inputs shaped like the weight, split along
        axis 0), then each optimizer result is all-gathered into every replica's original
        result."""
        n = len(gr.devices)
        new: list[tuple[Value, ...]] = []
        for j, up in enumerate(gr.updates):
            ins: list[Value | None] = []
            for i, x in enumerate(up.inputs):
                if i == 1:
                    ins.append(shards[j])
                elif x is not None and i in gr.sharded:
                    parts = self.op("Split", [x], {"axis": 0, "num_outputs": n},
                                    [_name(x, f"part{k}") for k in range(n)])
                    ins.append(parts[j])
                else:
                    ins.append(x)
            new.append(self.op(up.op_type, ins, dict(up.attrs),
                               [_name(o, "shard") for o in up.outputs]))
        for k in range(len(gr.updates[0].outputs)):
            self.op("MPIAllgather", [s[k] for s in new], {"axis": 0},
                    outs=[u.outputs[k] for u in gr.updates])


def dumps_strategy(plan: Sequence[VarSync]) -> str:
    """A resolved plan as strategy JSON text (one entry per gradient)."""
    return json.dumps({"variables": [p.to_json() for p in plan]})
