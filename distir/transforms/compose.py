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
   updates on every device;
6. returns the results (or, self-contained, gathers them on device 0).

Values are named ``{name}[_s{stage}][_mb{m}][_dp{d}][_tp{t}]``: the stage suffix marks a
copy sent to another stage (or a value needed on several), the others appear only when
``K``, ``dp`` or ``tp`` exceed 1, e.g. ``%dw1_mb3_tp1``.
"""

from __future__ import annotations

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
        env, acc, reduced = self.env, self.acc, plan.st.reduced
        started: set[tuple[int, int, str]] = set()
        templates: dict[tuple[int, bool, int], list] = {}
        bases = {id(g): [base_name(v) for v in g.outputs] for g in self.groups.values()}
        tp = plan.tp
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
                    name = self.namer(None, m, d)
                    outs = [Value(n) for b in bases[id(g)] for n in name(b)]
                    self.ops.append(Op(CALL, args, None, outs, callee=fn))
                    for j, v in enumerate(g.outputs):
                        vals = outs[j * tp:(j + 1) * tp]
                        if v in reduced:
                            acc[(v, d, s)] = vals
                        else:
                            env[(v, m, d, s)] = vals
                done.append((g, m))
            for g, m in done:
                for v, stages in g.send_to.items():
                    for s2 in stages:
                        for d in range(plan.dp):
                            self.send(v, env[(v, m, d, g.stage)], m, d, s2)

    def reduce_gradients(self) -> None:
        """Sum each batch-partial value over the replicas (the microbatches are summed by
        the ``_acc`` stage functions)."""
        plan = self.plan
        for v in sorted(plan.st.reduced, key=lambda x: self.prog.producer[x]):
            if v not in self.prog.live_values:
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
