"""The top-level function of a D/T/P/K program: placed inputs, microbatches, the pipeline
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

Values are named ``{name}[_s{stage}][_mb{m}][_dp{d}][_tp{t}]``: the stage suffix marks a
copy sent to another stage (or a value needed on several), the others appear only when
``K``, ``dp`` or ``tp`` exceed 1, e.g. ``%dw1_mb3_tp1``.
"""

from __future__ import annotations

import re
from functools import partial

from distir.ir.core import CALL, Function, Op, Value
from distir.transforms.emit import Emitter, base_name
from distir.transforms.hoist import BuilderBase
from distir.transforms.layout import B, T
from distir.transforms.program import SHAPE_OPERANDS
from distir.transforms.schedule import ticks
from distir.transforms.stages import StageFunction
from distir.transforms.structure import HOIST, POST

__all__ = ["MainBuilder"]


class MainBuilder(BuilderBase):
    """Builds ``@main`` for a plan and its stage functions."""

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
                for d in range(plan.dp):
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
        plan = self.plan
        env, acc = self.env, self.acc
        started: set[tuple[int, int, str]] = set()
        templates: dict[tuple[int, bool, int], list] = {}
        bases = {id(g): [base_name(v) for v in g.outputs] for g in self.groups.values()}
        unrolled: list[list[Value]] = []
        for tick in ticks(plan.schedule, plan.pp, plan.k, plan.training):
            done: list[tuple[StageFunction, int]] = []
            for kind, s, m in tick:
                g = self.groups.get((s, kind))
                if g is None:
                    continue
                for d in range(plan.dp):
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
                    if plan.dp > 1 and kind == "B" and m == plan.k - 1 and g.reduced:
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
                        for d in range(plan.dp):
                            self.send(v, env[(v, m, d, g.stage)], m, d, s2)

    def _bind_outputs(self, g: StageFunction, outs: list[Value], m: int, d: int) -> None:
        """Record the results of one unit of ``g`` on replica ``d``: running sums in
        ``acc``, the others in ``env``."""
        tp, reduced = self.plan.tp, self.plan.st.reduced
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
        plan, tp = self.plan, self.plan.tp
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
                        for d in range(plan.dp)]
                self.ops.append(Op("MPIAllreduce", [e.get(ret, ret) for e in envs], None,
                                   outs))
                for d in range(plan.dp):
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

    def reduce_gradients(self) -> None:
        """Sum each batch-partial value over the replicas (the microbatches are summed by
        the ``_acc`` stage functions); those reduced early (``_reduce_early``) are done."""
        plan = self.plan
        for v in sorted(plan.st.reduced, key=lambda x: self.prog.producer[x]):
            if v not in self.prog.live_values or v in self.early:
                continue
            s = self.home[v]
            blocks = [self.acc[(v, d, s)] for d in range(plan.dp)]
            if plan.dp > 1:
                sums: list[list[Value]] = [[] for _ in range(plan.dp)]
                for t in range(plan.tp):
                    outs = [Value(self.namer(None, None, d)(base_name(v))[t])
                            for d in range(plan.dp)]
                    self.ops.append(Op("MPIAllreduce", [b[t] for b in blocks], None, outs))
                    for d in range(plan.dp):
                        sums[d].append(outs[d])
                blocks = sums
            for d in range(plan.dp):
                self.env[(v, None, d, s)] = blocks[d]

    def updates(self) -> None:
        plan, prog = self.plan, self.prog
        for i in prog.live_ops:
            if plan.kind(i) != POST:
                continue
            op, s = prog.ops[i], plan.stage[i]
            for d in range(plan.dp):
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
                ranks = range(plan.tp) if T in plan.sh.layout[v].marks else range(1)
                for d in range(plan.dp):
                    out.extend(self.concat_microbatches(v, d, t) for t in ranks)
            else:
                s = self.once_stage(v)
                for d in range(plan.dp):
                    out.extend(self.once(v, d, s))
        return out

    def build(self, name: str, returns: list[Value]) -> Function:
        return Function(name, self.params, self.ops, returns)


def _replica_name(name: str, m: int | None, d: int) -> str:
    """The name of replica ``d``'s copy of a stage function's value ``name`` (microbatch
    ``m``), in ``@main``'s naming: ``{base}[_mb{m}]_dp{d}[_tp{t}]``."""
    base, rank = re.fullmatch(r"(.*?)(_tp\d+)?", name).groups()  # type: ignore[union-attr]
    return base + ("" if m is None else f"_mb{m}") + f"_dp{d}" + (rank or "")
