"""Part of the builder tower (``distir.transforms.tower``, ``dtp`` before the spmd passes).

The top-level function of a D/T/P/K program: placed inputs, microbatches, the pipeline
schedule, gradient reduction and the updates.

``@main`` does, in order:

1. takes the placed parameters (or, self-contained, distributes the sequential ones from
   device 0, see ``placement``);
2. splits each replica's batch into ``K`` microbatches (``Split``);
3. computes the batch-independent values once per device (constants, local target shapes,
   the causal mask, weight-only ops), deduplicated;
4. runs the schedule tick by tick: each unit is one call of a stage function per replica;
   after the units of a tick, the ``Send``s of the values they produced to later (forward)
   or earlier (backward) stages;
5. sums the gradients over replicas (``MPIAllreduce`` over the ``dp`` copies of each
   shard; the sum over microbatches is done by the ``_acc`` stage functions), then runs the
   updates on every device. With ``dp > 1``, each stage's last backward unit is written
   out in ``@main`` (its stage function's ops, a layer function call per layer, replicas
   interleaved op by op) with each gradient's allreduce right after the op that completes
   it: the allreduces, asynchronous (``ASYNC_OPS``), overlap the rest of the backward
   pass, as PyTorch's DistributedDataParallel does;
6. returns the results (or, self-contained, gathers them on device 0).

With ``dp > 1``, what every replica does alike on its own devices (the schedule up to the
first unit reduced early, and the updates) is written once, for replica 0, as a function
(``@replica``, ``@update``) that ``@main`` calls once per replica (``_per_replica``): its
transfers name their destination by a value on that device (``Send(%x, %w)``), so it
names no device and the simulator summarizes one call for all replicas.

Values are named ``{name}[_s{stage}][_mb{m}][_dp{d}][_tp{t}]``: the stage suffix marks a
copy sent to another stage (or a value needed on several), the others appear only when
``K``, ``dp`` or ``tp`` exceed 1, e.g. ``%dw1_mb3_tp1``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from distir.analysis.renaming import device_free
from distir.ir.core import CALL, Function, Op, Value
from distir.ir.inline import inline_top_calls
from distir.ir.types import DenseAttr
from distir.transforms.emit import Emitter, base_name
from distir.transforms.hoist import BuilderBase
from distir.transforms.layout import B, T
from distir.transforms.plan import Plan
from distir.transforms.program import SHAPE_OPERANDS
from distir.transforms.schedule import ticks
from distir.transforms.stages import StageFunction
from distir.transforms.structure import HOIST, POST

__all__ = ["MainBuilder"]


class MainBuilder(BuilderBase):
    """Builds ``@main`` for a plan and its stage functions."""

    def __init__(self, plan: Plan, groups: dict[tuple[int, str], StageFunction]) -> None:
        super().__init__(plan, groups)
        self._outlined: list[_Replica] = []
        """The functions written per replica (``_per_replica``), in order."""

    # -- the program --------------------------------------------------------------------------
    def split_microbatches(self) -> None:
        """``Split`` each replica's batch inputs into ``K`` microbatches."""
        plan, sh = self.plan, self.plan.sh
        for p in self.prog.fn.params:
            if p not in sh.data or p not in self.param_stages:
                continue
            axis = sh.layout[p].axis(B)
            assert axis is not None  # a batch input is split along its batch axis
            for s in self.param_stages[p]:
                for d in range(plan.written):
                    whole = self.env[(p, None, d, s)]
                    if plan.k == 1:
                        self.env[(p, 0, d, s)] = whole
                        continue
                    parts: list[list[Value]] = [[] for _ in range(plan.k)]
                    for t, x in enumerate(whole):
                        outs = [Value(self.namer(self.stage_tag(p, s), m, d)(base_name(p))[t])
                                for m in range(plan.k)]
                        self.ops.append(Op("Split", [x], {"axis": axis,
                                                          "num_outputs": plan.k}, outs))
                        for m in range(plan.k):
                            parts[m].append(outs[m])
                    for m in range(plan.k):
                        self.env[(p, m, d, s)] = parts[m]

    def _template(self, g: StageFunction, inputs: list[tuple], d: int) -> list:
        """The arguments of a call of ``g`` on replica ``d``: lists of values that are the
        same for every microbatch, and the values that change (``("m", value)`` for a
        per-microbatch value, ``("a", value)`` for a running sum)."""
        s = g.stage
        sh, params = self.plan.sh, self.prog.param_set
        out: list = []
        for inp in inputs:
            kind = inp[0]
            if kind == "v":
                v = inp[1]
                if v in params and v not in sh.data:
                    out.append(self.env[(v, None, d, s)])
                else:
                    out.append(("m", v))
            elif kind == "acc":
                out.append(("a", inp[1]))
            else:
                out.append(self.hoisted[(inp[1], d, s)])
        return out

    def run_schedule(self) -> None:
        """The units of the schedule, tick by tick, and the transfers after each tick.

        With ``dp > 1``, the ticks before the first unit whose gradients are reduced early
        (all of them in inference) are written once, for replica 0, as the function
        ``@replica``, which ``@main`` calls once per replica (``_per_replica``)."""
        plan = self.plan
        self._started: set[tuple[int, int, str]] = set()
        self._templates: dict[tuple[int, bool, int], list] = {}
        self._bases = {id(g): [base_name(v) for v in g.outputs] for g in self.groups.values()}
        order = ticks(plan.schedule, plan.pp, plan.k, plan.training)
        n = self._replica_ticks(order)
        if n and self._per_replica("replica", lambda: self._run_ticks(order[:n], range(1))):
            for _, s, kind in list(self._started):
                self._started.update((r, s, kind) for r in range(plan.written))
        else:
            n = 0
            self._started.clear()
        self._run_ticks(order[n:], range(plan.written))

    def _run_ticks(self, order: list, replicas: range) -> None:
        env, acc, started, templates = self.env, self.acc, self._started, self._templates
        bases = self._bases
        unrolled: list[list[Value]] = []
        for tick in order:
            done: list[tuple[StageFunction, int]] = []
            for kind, s, m in tick:
                g = self.groups.get((s, kind))
                if g is None:
                    continue
                for d in replicas:
                    first = (d, s, kind) not in started
                    started.add((d, s, kind))
                    use_acc = not first and g.acc is not None
                    fn = g.acc if use_acc else g.fn
                    tkey = (id(g), use_acc, d)
                    tmpl = templates.get(tkey)
                    if tmpl is None:
                        tmpl = templates[tkey] = self._template(
                            g, g.acc_inputs if use_acc else g.inputs, d)
                    args: list[Value] = []
                    for e in tmpl:
                        if type(e) is list:
                            args.extend(e)
                        elif e[0] == "m":
                            args.extend(env[(e[1], m, d, s)])
                        else:
                            args.extend(acc[(e[1], d, s)])
                    if self._reduced_early(g, kind, m):
                        unrolled.append(args)  # the stage's last unit: see _reduce_early
                        continue
                    name = self.namer(None, m, d)
                    outs = [Value(n) for b in bases[id(g)] for n in name(b)]
                    self.ops.append(Op(CALL, args, None, outs, callee=fn))
                    self._bind_outputs(g, outs, m, d)
                if unrolled:
                    assert fn is not None  # a unit that runs has its function
                    self._reduce_early(g, fn, unrolled, m)
                    unrolled = []
                done.append((g, m))
            for g, m in done:
                for v, stages in g.send_to.items():
                    for s2 in stages:
                        for d in replicas:
                            self.send(v, env[(v, m, d, g.stage)], m, d, s2)

    def _reduced_early(self, g: StageFunction, kind: str, m: int) -> bool:
        """Whether a unit is a stage's last backward unit, written out in ``@main`` with
        its gradients' allreduces (``_reduce_early``)."""
        return self.plan.dp > 1 and kind == "B" and m == self.plan.k - 1 and bool(g.reduced)

    # -- one replica's schedule as a function ----------------------------------------------------
    def _replica_ticks(self, order: list) -> int:
        """How many leading ticks ``@replica`` holds: those before the first unit reduced
        early; 0 (no replica function) with one replica, or when a stage the schedule
        sends to has no value of its own on some rank to name the destination by."""
        plan = self.plan
        if plan.dp == 1:
            return 0
        if plan.pp > 1 and self._stage_anchors() is None:
            return 0
        for i, tick in enumerate(order):
            for kind, s, m in tick:
                g = self.groups.get((s, kind))
                if g is not None and self._reduced_early(g, kind, m):
                    return i
        return len(order)

    def _stage_anchors(self) -> dict[tuple[int, int], Value] | None:
        """``(stage, rank) -> a value replica 0 holds there before the schedule runs`` (a
        weight shard or a batch-independent value a unit of that stage takes): inside
        ``@replica``, a ``Send`` to that rank names its destination by this value, so
        that the function is generic over devices."""
        plan = self.plan
        out: dict[tuple[int, int], Value] = {}
        for (s, _), g in self.groups.items():
            if (s, 0) in out:
                continue
            for e in self._template(g, g.inputs, 0):
                if type(e) is list and len(e) == plan.written_tp:
                    for t, v in enumerate(e):
                        out[(s, t)] = v
                    break
        if len(out) < plan.pp * plan.written_tp:
            return None
        return out

    def _per_replica(self, name: str, emit: Callable[[], None]) -> bool:
        """Write replica 0's ops (``emit``: appends them to ``self.ops`` and records their
        results in ``env``/``acc``, reading replica 0's values) as the function ``@name``,
        which ``@main`` calls once per replica; ``False``, and nothing written, when the
        ops are not generic over devices (an op names a device) or read a value that is
        not replica 0's copy of a per-replica one.

        Every replica runs the same ops on its own devices, so one function serves all:
        its parameters are the replica's values it reads (weight shards, microbatches,
        batch-independent values), its sends name their destination by a parameter on
        that device (``Send(%x, %w)``), and it returns the values ``@main`` reads later.
        The simulator summarizes one call and renames it for the others
        (``distir.analysis.renaming``), so the program's size no longer grows with the
        replicas. Each device runs the same ops in the same order as when every replica's
        ops are written out in ``@main``.

        The results are found by use: the entries ``emit`` made in ``env`` and ``acc``
        are taken out, and reading one for any replica afterwards (``_ReplicaEntries``)
        makes that replica's result of the call; ``build`` writes the calls with the
        results read, where ``emit``'s ops would have been."""
        plan = self.plan
        # Replica 0's values as the function's own (fresh: the values of @main may carry
        # its declared types), each with where replica d finds its copy.
        fresh: dict[Value, Value] = {}
        where: dict[Value, tuple[str, tuple, int]] = {}
        saved: list[tuple[dict, tuple, list[Value], list[Value]]] = []
        tables: tuple[tuple[dict, int, str], ...] = (
            (self.env, 2, "env"), (self.hoisted, 1, "hoisted"), (self.acc, 1, "acc"))
        for table, at, kind in tables:
            for key, vals in table.items():
                if key[at] != 0:
                    continue
                new = []
                for t, x in enumerate(vals):
                    f = fresh.get(x)
                    if f is None:
                        f = fresh[x] = Value(_generic_name(x.name))
                        where[f] = (kind, key, t)
                    new.append(f)
                saved.append((table, key, vals, new))
                dict.__setitem__(table, key, new)
        sizes = [len(table) for table, _, _ in tables]
        self._anchors = self._stage_anchors() if plan.pp > 1 else None
        main_ops, self.ops = self.ops, []

        def constant(attrs: list[DenseAttr], key: tuple, hint: str) -> list[Value]:
            # A constant the ops need and @main has not made: made in @main, before the
            # calls, for every replica; the function takes replica 0's.
            self.outline = None  # (named as @main's values)
            for d in range(plan.written):
                outside.add(key[:1] + (d,) + key[2:])
                self._constants(attrs, key[:1] + (d,) + key[2:], hint, main_ops)
            self.outline = constant
            new = []
            for t, x in enumerate(self.hoisted[key]):
                f = fresh[x] = Value(_generic_name(x.name))
                where[f] = ("hoisted", key, t)
                new.append(f)
            saved.append((self.hoisted, key, self.hoisted[key], new))
            dict.__setitem__(self.hoisted, key, new)
            return new

        outside: set[tuple] = set()
        self.outline = constant
        try:
            emit()
        finally:
            self.outline = None
            # (``constant`` refers to itself through its closure: unbind it, so that the
            # values it holds are freed by reference counting, not the cyclic collector.)
            constant = None  # type: ignore[assignment]
        body, self.ops = self.ops, main_ops
        self._anchors = None
        for k in [k for k in self._templates if k[2] == 0]:
            del self._templates[k]
        # What ``emit`` made: new entries, and entries it replaced (running sums).
        made: list[list[tuple]] = [list(itertools.islice(table, n, None))
                                   for (table, _, _), n in zip(tables, sizes)]
        made[1] = [k for k in made[1] if k not in outside]
        for table, key, vals, new in saved:
            if table[key] is new:
                dict.__setitem__(table, key, vals)
            else:
                made[[t[0] for t in tables].index(table)].append(key)
        used = set(itertools.chain.from_iterable(op.inputs for op in body))
        used.discard(None)
        defined = {o for op in body for o in op.outputs}
        fn = Function(name, [f for f in where if f in used], body, ())
        if not body or not used <= defined | where.keys() or not device_free(fn, {}):
            for (table, _, _), keys in zip(tables, made):  # undo: written out instead
                for k in keys:
                    dict.pop(table, k, None)
            for table, key, vals, _ in saved:
                dict.__setitem__(table, key, vals)
            return False
        for k in made[1]:  # batch-independent values computed inside: again outside
            del self.hoisted[k]
        inner = _ReplicaResults(self, where)
        env = self.env if isinstance(self.env, _ReplicaEntries) else _ReplicaEntries(
            self.env, 2)
        acc = self.acc if isinstance(self.acc, _ReplicaEntries) else _ReplicaEntries(
            self.acc, 1)
        self.env, self.acc = env, acc
        for table, keys in ((env, made[0]), (acc, made[2])):
            for k in keys:
                vals = dict.__getitem__(table, k)
                # (An entry only read, as an earlier function's result, stays as it is.)
                if all(x in defined or x in where for x in vals):
                    table.made[k] = (inner, dict.pop(table, k))
        calls = [Op(CALL, [self._on_replica(where[p], d) for p in fn.params], None, (),
                    callee=fn) for d in range(plan.written)]
        self._outlined.append(_Replica(fn, calls, len(self.ops), inner))
        return True

    def _on_replica(self, place: tuple[str, tuple, int], d: int) -> Value:
        """Replica ``d``'s copy of a value replica 0 holds at ``place``."""
        kind, key, t = place
        if kind == "env":
            return self.env[key[:2] + (d,) + key[3:]][t]
        table = self.hoisted if kind == "hoisted" else self.acc
        return table[key[:1] + (d,) + key[2:]][t]

    def _bind_outputs(self, g: StageFunction, outs: list[Value], m: int, d: int) -> None:
        """Record the results of one unit of ``g`` on replica ``d``: running sums in
        ``acc``, the others in ``env``."""
        tp, reduced = self.plan.written_tp, self.plan.st.reduced
        for j, v in enumerate(g.outputs):
            vals = outs[j * tp:(j + 1) * tp]
            if v in reduced:
                self.acc[(v, d, g.stage)] = vals
            else:
                self.env[(v, m, d, g.stage)] = vals

    def _reduce_early(self, g: StageFunction, fn: Function, args: list[list[Value]],
                      m: int) -> None:
        """The last backward unit of stage ``g.stage`` on every replica, written out: the
        ops of ``fn`` (calls of layer functions stay calls) for each replica in turn, op by
        op, and after the op that completes a gradient, its ``MPIAllreduce`` over the
        replicas (one per tensor-parallel rank). The sums go to ``env``, as
        ``reduce_gradients`` would put them."""
        plan, tp = self.plan, self.plan.written_tp
        envs: list[dict[Value, Value]] = [dict(zip(fn.params, a)) for a in args]
        # The gradients to reduce, ``(value, rank, return position)``, by the index of the
        # op that computes them (-1: an argument returned as it is).
        producer = {o: i for i, op in enumerate(fn.ops) for o in op.outputs}
        done_at: dict[int, list[tuple[Value, int, int]]] = {}
        for j, v in enumerate(g.outputs):
            if v in plan.st.reduced and v in self.prog.live_values:
                for t in range(tp):
                    r = j * tp + t
                    done_at.setdefault(producer.get(fn.returns[r], -1), []).append((v, t, r))

        def reduce(items: list[tuple[Value, int, int]]) -> None:
            for v, t, r in items:
                ret = fn.returns[r]
                outs = [Value(self.namer(None, None, d)(base_name(v))[t])
                        for d in range(plan.written)]
                self._allreduce([e.get(ret, ret) for e in envs], outs, g.stage, t)
                for d in range(plan.written):
                    self.env.setdefault((v, None, d, g.stage), [outs[d]] * tp)[t] = outs[d]
                self.early.add(v)

        reduce(done_at.pop(-1, []))
        mb = m if plan.k > 1 else None
        for i, op in enumerate(fn.ops):
            for d, e in enumerate(envs):
                outs = [Value(o.name if o.name in (None, "_") else
                              _replica_name(o.name, mb, d), o.type) for o in op.outputs]
                self.ops.append(Op(op.op_type,
                                   [None if x is None else e.get(x, x) for x in op.inputs],
                                   dict(op.attrs) or None, outs, callee=op.callee))
                e.update(zip(op.outputs, outs))
            if i in done_at:
                reduce(done_at[i])
        for d, e in enumerate(envs):
            self._bind_outputs(g, [e.get(r, r) for r in fn.returns], m, d)

    def _allreduce(self, ins: list[Value], outs: list[Value], s: int, t: int) -> None:
        """The sum over the replicas of rank ``t`` of stage ``s``'s copies ``ins`` (one per
        replica written): an ``MPIAllreduce``, or with replica 0 alone, its part of one
        (``ReplicaAllreduce`` over every replica's device)."""
        if self.plan.written == self.plan.dp:
            self.ops.append(Op("MPIAllreduce", ins, None, outs))
        else:
            self.ops.append(Op("ReplicaAllreduce", ins,
                               {"devices": self.plan.replica_group(s, t)}, outs))

    def reduce_gradients(self) -> None:
        """Sum each batch-partial value over the replicas (the microbatches are summed by
        the ``_acc`` stage functions); those reduced early (``_reduce_early``) are done."""
        plan = self.plan
        for v in sorted(plan.st.reduced, key=lambda x: self.prog.producer[x]):
            if v not in self.prog.live_values or v in self.early:
                continue
            s = self.home[v]
            blocks = [self.acc[(v, d, s)] for d in range(plan.written)]
            if plan.dp > 1:
                sums: list[list[Value]] = [[] for _ in range(plan.written)]
                for t in plan.ranks():
                    outs = [Value(self.namer(None, None, d)(base_name(v))[t])
                            for d in range(plan.written)]
                    self._allreduce([b[t] for b in blocks], outs, s, t)
                    for d in range(plan.written):
                        sums[d].append(outs[d])
                blocks = sums
            for d in range(plan.written):
                self.env[(v, None, d, s)] = blocks[d]

    def updates(self) -> None:
        """The updates (and whatever else follows the gradients' reduction) on every
        replica: with ``dp > 1``, written once as ``@update`` and called per replica
        (``_per_replica``)."""
        if self.plan.dp > 1 and self._per_replica("update", lambda: self._updates(range(1))):
            return
        self._updates(range(self.plan.written))

    def _updates(self, replicas: range) -> None:
        plan, prog = self.plan, self.prog
        for i in prog.live_ops:
            if plan.kind(i) != POST:
                continue
            op, s = prog.ops[i], plan.stage[i]
            for d in replicas:
                local: dict[Value, list[Value]] = {}
                for k, x in enumerate(op.inputs):
                    if x is not None and (op.op_type, k) not in SHAPE_OPERANDS:
                        local[x] = self.once(x, d, s)
                Emitter(plan, self.ops, local, self.namer(None, None, d),
                        partial(self.const, d=d, s=s)).emit(op)
                for o in op.outputs:
                    self.env[(o, None, d, s)] = local[o]

    def once(self, v: Value, d: int, s: int) -> list[Value]:
        """A value computed once (weight, constant, reduced gradient, update) on ``s``."""
        if v in self.prog.param_set:
            vals = self.env.get((v, None, d, s))
            if vals is not None:
                return vals
        i = self.prog.producer.get(v)
        if i is not None and self.plan.kind(i) == HOIST:
            return self.hoist(v, d, s)
        return self.get(v, None, d, s)

    def concat_microbatches(self, v: Value, d: int, t: int) -> Value:
        """The replica's whole-batch value of a per-microbatch result (on its stage)."""
        plan = self.plan
        s = self.once_stage(v)
        parts = [self.env[(v, m, d, s)][t] for m in range(plan.k)]
        if plan.k == 1:
            return parts[0]
        y = Value(self.namer(None, None, d)(base_name(v))[t])
        axis = plan.sh.layout[v].axis(B)
        assert axis is not None  # a per-microbatch value keeps the batch axis
        self.ops.append(Op("Concat", parts, {"axis": axis}, [y]))
        return y

    def results(self) -> list[Value]:
        """The default variant's results: every device's copy of a value computed once,
        each replica's whole batch of a per-microbatch value (rank 0 unless split)."""
        plan, st = self.plan, self.plan.st
        out: list[Value] = []
        for v in self.prog.fn.returns:
            if st.value_kind.get(v) == "m":
                ranks = plan.ranks() if T in plan.sh.layout[v].marks else range(1)
                for d in range(plan.written):
                    out.extend(self.concat_microbatches(v, d, t) for t in ranks)
            else:
                s = self.once_stage(v)
                for d in range(plan.written):
                    out.extend(self.once(v, d, s))
        return out

    def build(self, name: str, returns: list[Value]) -> Function:
        """``@main``; with one replica written (``Plan.written``), its per-replica
        functions, called once, are written out in it (the same ops in the same order:
        a call of a function that runs once only costs its simulation a summary)."""
        fn = self._build(name, returns)
        if self.plan.written == 1 and self._outlined:
            outlined = {id(r.fn) for r in self._outlined}
            fn = inline_top_calls(fn, lambda f: id(f) in outlined, consume=True)
        return fn

    def release(self) -> None:
        """Drop the tables that refer back to the builder (the per-replica results), so
        that reference counting frees its values, not the cyclic collector."""
        for r in self._outlined:
            r.results.mb = None  # type: ignore[assignment]
        self._outlined = []

    def _build(self, name: str, returns: list[Value]) -> Function:
        for rep in reversed(self._outlined):  # the calls, with the results @main reads
            res = rep.results
            if not res.rets:  # nothing it computes is read
                continue
            rep.fn.returns = tuple(res.rets)
            for d, c in enumerate(rep.calls):
                outs = res.outs[d]
                c.outputs = tuple(outs[j] if j in outs else Value(
                    _on_replica_name(x.name, d)) for j, x in enumerate(res.rets))
            self.ops[rep.at:rep.at] = rep.calls
        return Function(name, self.params, self.ops, returns)


def _split_rank(name: str) -> tuple[str, str]:
    """``name`` as (base, ``_tp{t}`` suffix or ``""``)."""
    head, sep, tail = name.rpartition("_tp")
    if sep and tail.isdigit():
        return head, sep + tail
    return name, ""


def _on_replica_name(name: str | None, d: int) -> str:
    """Replica ``d``'s name in ``@main`` for a value a function written per replica
    returns (named there without the replica: ``{base}[_s{s}][_mb{m}][_tp{t}]``)."""
    base, rank = _split_rank(name or "v")
    return f"{base}_dp{d}{rank}"


def _generic_name(name: str | None) -> str | None:
    """The name inside a function written per replica of replica 0's value ``name``:
    without its ``_dp0`` (``{base}[_s{s}][_mb{m}]_dp0[_tp{t}]``)."""
    if name is None:
        return None
    head, sep, tail = name.rpartition("_dp0")
    if sep and (not tail or (tail[:3] == "_tp" and tail[3:].isdigit())):
        return head + tail
    return name


def _replica_name(name: str, m: int | None, d: int) -> str:
    """The name of replica ``d``'s copy of a stage function's value ``name`` (microbatch
    ``m``), in ``@main``'s naming: ``{base}[_mb{m}]_dp{d}[_tp{t}]``."""
    base, rank = _split_rank(name)
    return base + ("" if m is None else f"_mb{m}") + f"_dp{d}" + rank


class _ReplicaResults:
    """The results of ``@replica``'s calls that ``@main`` reads, made on first read: one
    result per inner value read (``rets``), one output value per replica (``outs``)."""

    def __init__(self, mb: MainBuilder, where: dict[Value, tuple[str, tuple, int]]) -> None:
        self.mb = mb
        self.where = where
        self.rets: list[Value] = []
        self.index: dict[Value, int] = {}
        self.outs: list[dict[int, Value]] = [{} for _ in range(mb.plan.dp)]

    def value(self, x: Value, d: int) -> Value:
        """Replica ``d``'s copy, in ``@main``, of ``x``: a value of ``@replica`` (then
        one of the call's results) or one it reads (then replica ``d``'s own)."""
        place = self.where.get(x)
        if place is not None:
            return self.mb._on_replica(place, d)
        j = self.index.get(x)
        if j is None:
            j = self.index[x] = len(self.rets)
            self.rets.append(x)
        out = self.outs[d].get(j)
        if out is None:
            out = self.outs[d][j] = Value(_on_replica_name(x.name, d))
        return out


class _ReplicaEntries(dict):
    """``env`` or ``acc`` once functions are written per replica: the entries a
    function's ops made for replica 0 (``made``: its results object and the function's
    values) are given to each replica on first read, as the results of its call. ``at``:
    the position of the replica in a key."""

    def __init__(self, table: dict, at: int) -> None:
        super().__init__(table)
        self.at = at
        self.made: dict[tuple, tuple[_ReplicaResults, list[Value]]] = {}

    def __missing__(self, key: tuple) -> list[Value]:
        at = self.at
        d = key[at]
        hit = self.made.get(key[:at] + (0,) + key[at + 1:])
        if hit is None:
            raise KeyError(key)
        results, vals = hit
        value = results.value
        out = self[key] = [value(x, d) for x in vals]
        return out

    def get(self, key: tuple, default: object = None) -> object:  # type: ignore[override]
        try:
            return self[key]
        except KeyError:
            return default


@dataclass
class _Replica:
    fn: Function
    calls: list[Op]
    at: int
    """Where in ``@main`` the calls go: where the replicas' ticks would have been."""
    results: _ReplicaResults
