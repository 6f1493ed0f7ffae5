"""Per-gradient synchronisation plans: finding a data-parallel program's gradients
(``gradients``), the strategy JSON (``resolve``: builders, bucket sizes, one entry per
gradient) and the checks a plan must pass before ``distir.transforms.synchronize``
rewrites the program (``check``). See docs/synchronization.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from distir.analysis.api import type_env
from distir.analysis.values import type_of
from distir.errors import TransformError
from distir.ir.core import Function, Module, Op, Value
from distir.ir.inline import inline_top_calls
from distir.ir.types import DType, TensorType

__all__ = ["OPTIMIZERS", "BUILDERS", "Gradient", "VarSync", "gradients", "resolve",
           "check", "dumps_strategy", "servers", "split_groups", "DDP_BUCKET_BYTES",
           "DDP_FIRST_BUCKET_BYTES", "COMPRESS"]

OPTIMIZERS = frozenset({"SGDOptimizer", "AdamOptimizer"})
"""Optimizer ops: elementwise in the weight (input 0), the gradient at input 1."""
VIEWS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})
"""Ops that may stand between a gradient's all-reduce and its optimizer (a view of the sum
is the sum of the views)."""

BUILDERS = ("per-gradient", "ddp", "merge-all", "chunk", "ps", "ps-lb", "partitioned-ps",
            "hierarchical", "zero-1", "zero-2", "powersgd")
DDP_BUCKET_BYTES = 25 * 1024 * 1024
"""``torch.nn.parallel.DistributedDataParallel``'s default ``bucket_cap_mb`` (25 MiB)."""
DDP_FIRST_BUCKET_BYTES = 1024 * 1024
"""DDP caps its first bucket (the first gradients ready) at 1 MiB so that communication
starts early."""

COMPRESS = {"fp16": DType.Float16, "bf16": DType.BFloat16}
_KINDS = ("allreduce", "ps", "zero", "hierarchical", "powersgd")


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
    """How one gradient travels. ``kind``:

    - ``"allreduce"``: in bucket ``group`` (gradients of one group share one collective);
    - ``"ps"``: reduced to and updated on a server, the results broadcast; with
      ``shards`` > 1 the gradient (and the update) is partitioned along ``axis`` into that
      many equal shards, shard ``k`` served by the ``k``-th replica device from
      ``device`` on (``servers``);
    - ``"zero"``: ZeRO ``stage`` 1 or 2;
    - ``"hierarchical"``: reduced to the first replica of each node (``node_size``
      replicas per node, by device number), all-reduced across those, broadcast within
      each node;
    - ``"powersgd"``: PowerSGD of rank ``rank`` with error feedback (lossy).

    ``compress``: ``None``, ``"fp16"`` or ``"bf16"`` (the gradient is cast before its
    communication and back after)."""

    kind: str = "allreduce"
    group: int = 0
    device: int = 0
    stage: int = 2
    compress: str | None = None
    shards: int = 1
    axis: int = 0
    node_size: int = 0
    rank: int = 0

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"sync": self.kind}
        if self.kind == "allreduce":
            d["group"] = self.group
        elif self.kind == "ps":
            d["device"] = self.device
            if self.shards > 1:
                d.update(shards=self.shards, axis=self.axis)
        elif self.kind == "zero":
            d["stage"] = self.stage
        elif self.kind == "hierarchical":
            d["node_size"] = self.node_size
        else:
            d["rank"] = self.rank
        if self.compress:
            d["compress"] = self.compress
        return d


def servers(gr: Gradient, p: VarSync) -> tuple[int, ...]:
    """The server device of each shard of a (partitioned) parameter server."""
    devs = gr.devices
    k0 = devs.index(p.device) if p.device in devs else 0
    return tuple(devs[(k0 + k) % len(devs)] for k in range(p.shards))


# -- finding the gradients --------------------------------------------------------------

def _entry(fn: Function | Module) -> Function:
    return with_updates_inlined(fn.entry if isinstance(fn, Module) else fn)


def _updates_in(fn: Function) -> bool:
    return any(op.op_type in OPTIMIZERS or (op.callee is not None and _updates_in(op.callee))
               for op in fn.ops)


def _readers(fn: Function) -> dict[Value, list[tuple[Op, int]]]:
    """Per value, the ops of ``fn`` reading it and at which input."""
    readers: dict[Value, list[tuple[Op, int]]] = {}
    for op in fn.ops:
        for i, v in enumerate(op.inputs):
            if v is not None:
                readers.setdefault(v, []).append((op, i))
    return readers


def _reduced(fn: Function, memo: dict[int, tuple[bool, ...]]) -> tuple[bool, ...]:
    """Per result of ``fn``, whether it is an ``MPIAllreduce``'s result, possibly through
    views (``VIEWS``) or the results of calls of functions whose result is one."""
    got = memo.get(id(fn))
    if got is None:
        memo[id(fn)] = (False,) * len(fn.returns)  # (no recursion through a cycle of calls)
        maker = {o: (op, j) for op in fn.ops for j, o in enumerate(op.outputs)}
        out = []
        for r in fn.returns:
            found = False
            v: Value | None = r
            while v is not None and v in maker:
                op, j = maker[v]
                if op.op_type == "MPIAllreduce":
                    found = True
                elif op.callee is not None:
                    found = _reduced(op.callee, memo)[j]
                elif op.op_type in VIEWS:
                    v = op.inputs[0]
                    continue
                break
            out.append(found)
        got = memo[id(fn)] = tuple(out)
    return got


def _gradient_calls(fn: Function, memo: dict[int, tuple[bool, ...]]) -> set[int]:
    """The callees (by id) of ``fn``'s calls that return a gradient's sum: a result that
    an optimizer op of ``fn`` reads as its gradient (input 1), possibly through views, and
    that the callee makes by an all-reduce (``_reduced``)."""
    readers = _readers(fn)
    out: set[int] = set()
    for op in fn.ops:
        if op.callee is None or id(op.callee) in out:
            continue
        for k, r in enumerate(op.outputs):
            rs = readers.get(r, [])
            while len(rs) == 1 and rs[0][1] == 0 and rs[0][0].op_type in VIEWS:
                rs = readers.get(rs[0][0].outputs[0], [])
            if any(i == 1 and u.op_type in OPTIMIZERS for u, i in rs) \
                    and _reduced(op.callee, memo)[k]:
                out.add(id(op.callee))
                break
    return out


def with_updates_inlined(fn: Function) -> Function:
    """``fn`` with the calls that hide a gradient's all-reduce or its updates written out,
    so that each gradient's all-reduce and the updates reading it are ops of the entry
    function: calls of functions that update weights (``dtp``'s per-replica ``@update``,
    the passes' update layer functions), then, level by level, calls of functions that
    return a sum an optimizer reads as its gradient (the passes issue a gradient's
    all-reduce inside the layer or stage function of the last microbatch's backward pass
    that completes it). ``fn`` itself when there are none. A caller that finds gradients
    and rewrites them inlines once and passes the result to both."""
    fn = inline_top_calls(fn, _updates_in)
    memo: dict[int, tuple[bool, ...]] = {}
    while which := _gradient_calls(fn, memo):
        fn = inline_top_calls(fn, partial(_among, which))
    return fn


def _among(ids: set[int], callee: Function) -> bool:
    return id(callee) in ids


def gradients(fn: Function | Module) -> tuple[Gradient, ...]:
    """The gradient all-reduces of ``fn``'s entry function, in readiness order."""
    fn = _entry(fn)
    readers = _readers(fn)
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
    if c is not None and c not in COMPRESS:
        raise TransformError(f"{where}: compress must be one of {sorted(COMPRESS)} or "
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
        if "device" in s:
            dev = _int(s, "device", None, where)
            return tuple(VarSync("ps", device=dev, compress=comp) for _ in grads)
        return tuple(VarSync("ps", device=gr.devices[0], compress=comp) for gr in grads)
    load: dict[int, int] = {}

    def least(gr: Gradient) -> int:
        return min(gr.devices, key=lambda d: (load.get(d, 0), d))

    if name == "ps-lb":  # AutoDist's load-balanced PS: each variable on the least loaded
        out = []
        for gr in grads:
            dev = least(gr)
            load[dev] = load.get(dev, 0) + gr.nbytes
            out.append(VarSync("ps", device=dev, compress=comp))
        return tuple(out)
    if name == "partitioned-ps":  # AutoDist's partitioned PS: shards on distinct servers
        out = []
        for gr in grads:
            shards = _int(s, "shards", len(gr.devices), where, 1)
            if gr.sharded and gr.type.rank and gr.type.shape[0] % shards == 0 and shards > 1:
                p = VarSync("ps", device=least(gr), shards=shards, compress=comp)
                for d in servers(gr, p):
                    load[d] = load.get(d, 0) + gr.nbytes // shards
            else:
                p = VarSync("ps", device=least(gr), compress=comp)
                load[p.device] = load.get(p.device, 0) + gr.nbytes
            out.append(p)
        return tuple(out)
    if name == "hierarchical":
        size = _int(s, "node_size", None, where, 1)
        return tuple(VarSync("hierarchical", node_size=size, compress=comp) for _ in grads)
    if name == "powersgd":
        rank = _int(s, "rank", 4, where, 1)
        return tuple(VarSync("powersgd", rank=rank)
                     if gr.type.rank >= 2 and min(_matrix(gr.type.shape)) > rank
                     else VarSync("allreduce", group=n + i, compress=comp)
                     for i, gr in enumerate(grads))
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
    unknown = set(e) - {"sync", "group", "device", "stage", "compress", "shards", "axis",
                        "node_size", "rank"}
    if unknown:
        raise TransformError(f"{where}: unknown keys {sorted(unknown)}; an entry takes "
                             "sync, group, device, stage, compress, shards, axis, "
                             "node_size, rank")
    c = _compress(e, where, comp)
    if kind == "allreduce":
        return VarSync("allreduce", group=_int(e, "group", i, where), compress=c)
    if kind == "ps":
        return VarSync("ps", device=_int(e, "device", gr.devices[0], where), compress=c,
                       shards=_int(e, "shards", 1, where, 1), axis=_int(e, "axis", 0, where))
    if kind == "hierarchical":
        return VarSync("hierarchical", node_size=_int(e, "node_size", None, where, 1),
                       compress=c)
    if kind == "powersgd":
        if c is not None:
            raise TransformError(f"{where}: PowerSGD sends low-rank factors; it takes no "
                                 "compress")
        return VarSync("powersgd", rank=_int(e, "rank", 4, where, 1))
    if kind == "zero":
        stage = _int(e, "stage", 2, where, 1)
        if stage not in (1, 2):
            raise TransformError(f"{where}: stage must be 1 or 2, got {stage}")
        return VarSync("zero", stage=stage, compress=c)
    raise TransformError(f"{where}: sync must be one of {', '.join(_KINDS)}, got {kind!r}")


def resolve(fn: Function | Module | Sequence[Gradient], strategy: Mapping[str, Any],
            ) -> tuple[VarSync, ...]:
    """The per-gradient plan of ``strategy`` (see the module docstring), its buckets split
    by data-parallel group (``split_groups``)."""
    grads = gradients(fn) if isinstance(fn, (Function, Module)) else tuple(fn)
    return split_groups(grads, _resolve(grads, strategy))


def split_groups(grads: Sequence[Gradient], plan: Sequence[VarSync]) -> tuple[VarSync, ...]:
    """``plan`` with every all-reduce group that holds gradients of several data-parallel
    groups (replica device sets, as under tensor or pipeline parallelism) split into one
    bucket per data-parallel group; group ids renumbered by first appearance."""
    ids: dict[tuple[int, frozenset[int]], int] = {}
    out = []
    for gr, p in zip(grads, plan):
        if p.kind == "allreduce":
            key = (p.group, frozenset(gr.devices))
            p = VarSync("allreduce", group=ids.setdefault(key, len(ids)), compress=p.compress)
        out.append(p)
    return tuple(out)


def _resolve(grads: tuple[Gradient, ...], strategy: Mapping[str, Any],
             ) -> tuple[VarSync, ...]:
    if not isinstance(strategy, Mapping):
        raise TransformError(f"a strategy is a JSON object such as {{\"builder\": \"ddp\"}}, "
                             f"got {strategy!r}")
    known = {"builder", "bucket_bytes", "first_bucket_bytes", "k", "device", "compress",
             "variables", "shards", "node_size", "rank"}
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




def _matrix(shape: tuple[int, ...]) -> tuple[int, int]:
    """A gradient as PowerSGD's matrix: rows = axis 0, columns = the rest."""
    cols = 1
    for s in shape[1:]:
        cols *= s
    return shape[0], cols


def check(grads: Sequence[Gradient], plan: Sequence[VarSync], pos: Mapping[int, int]) -> None:
    """A plan the rewrite can apply: servers hold replicas, ZeRO shards divide, buckets
    hold one dtype and are read only after their last member is ready."""
    groups: dict[int, list[int]] = {}
    for gr, p in zip(grads, plan):
        where = f"gradient {gr.index} (of %{gr.weight})"
        if p.kind == "allreduce":
            groups.setdefault(p.group, []).append(gr.index)
        elif p.kind == "ps" and p.device not in gr.devices:
            raise TransformError(f"{where}: device {p.device} holds no replica; a parameter "
                                 f"server must be one of {sorted(gr.devices)}")
        elif p.kind == "ps" and p.shards > 1:
            t = gr.type
            if not 0 <= p.axis < t.rank or t.shape[p.axis] % p.shards:
                raise TransformError(f"{where}: cannot partition a {t.shape} gradient into "
                                     f"{p.shards} equal shards along axis {p.axis}: pick "
                                     "an axis whose size the shard count divides")
            if not gr.sharded:
                raise TransformError(f"{where}: its optimizer ({gr.updates[0].op_type}) has "
                                     "results not shaped like the weight, so the server "
                                     "cannot partition it: use shards 1")
        elif p.kind == "hierarchical" and p.node_size < 1:
            raise TransformError(f"{where}: hierarchical needs node_size >= 1 (replicas "
                                 "per node)")
        elif p.kind == "powersgd":
            if gr.type.rank < 2:
                raise TransformError(f"{where}: PowerSGD compresses matrices, the gradient "
                                     f"is {gr.type.shape}: all-reduce it instead")
            if p.rank > min(_matrix(gr.type.shape)):
                raise TransformError(f"{where}: rank {p.rank} exceeds the "
                                     f"{_matrix(gr.type.shape)} matrix's smaller side")
            if gr.type.dtype not in (DType.Float32, DType.Float64):
                raise TransformError(f"{where}: PowerSGD needs a float32 or float64 "
                                     f"gradient, got {gr.type.dtype.value}")
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
        dt0 = COMPRESS.get(plan[ms[0]].compress or "", m0.type.dtype)
        for i in ms:
            gr = grads[i]
            if gr.devices != m0.devices:
                raise TransformError(f"group {g}: gradients {ms[0]} and {i} list their "
                                     "replicas in different orders; bucket them apart")
            dt = COMPRESS.get(plan[i].compress or "", gr.type.dtype)
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



def dumps_strategy(plan: Sequence[VarSync]) -> str:
    """A resolved plan as strategy JSON text (one entry per gradient)."""
    return json.dumps({"variables": [p.to_json() for p in plan]})
