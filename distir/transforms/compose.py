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

from collections.abc import Callable

import numpy as np

from distir.analysis.rules import NUMPY_RULES, load_rules
from distir.ir.core import CALL, Function, Op, Value
from distir.ir.types import DenseAttr
from distir.transforms.emit import Emitter, base_name
from distir.transforms.layout import B, T
from distir.transforms.plan import HOIST, MB, POST, Plan
from distir.transforms.program import SHAPE_OPERANDS, SHAPE_OPS
from distir.transforms.schedule import ticks
from distir.transforms.stages import StageFunction

__all__ = ["MainBuilder", "FOLD_LIMIT"]

FOLD_LIMIT = 256
"""Batch-independent values computed from constants with at most this many elements are
written as constants."""

Key = tuple  # (value, microbatch or None, replica, stage)


class MainBuilder:
    """Builds ``@main`` for a plan and its stage functions."""

    def __init__(self, plan: Plan, groups: dict[tuple[int, str], StageFunction]) -> None:
        load_rules()
        self.plan = plan
        self.prog = plan.prog
        self.groups = groups
        self.ops: list[Op] = []
        self.params: list[Value] = []
        self.env: dict[Key, list[Value]] = {}
        self.hoisted: dict[tuple[int, int, int], list[Value]] = {}
        self.acc: dict[tuple[Value, int, int], list[Value]] = {}
        self.home: dict[Value, int] = {}
        for i in self.prog.live_ops:
            if plan.kind(i) != HOIST:
                for v in self.prog.ops[i].outputs:
                    self.home[v] = plan.stage[i]
        self.param_stages = self._param_stages()
        self._folded: dict[int, np.ndarray | None] = {}

    # -- names -------------------------------------------------------------------------------
    def namer(self, s: int | None, m: int | None, d: int) -> Callable[[str], list[str]]:
        """``base -> [name on rank t]`` for values of stage-copy ``s``, microbatch ``m``,
        replica ``d``."""
        plan = self.plan
        suffix = (f"_s{s}" if s is not None else "") + (
            f"_mb{m}" if m is not None and plan.k > 1 else "") + (
            f"_dp{d}" if plan.dp > 1 else "")
        ends = [f"{suffix}_tp{t}" for t in range(plan.tp)] if plan.tp > 1 else [suffix]
        return lambda b: [b + e for e in ends]

    def stage_tag(self, v: Value, s: int) -> int | None:
        """The stage suffix of ``v``'s copy on stage ``s``: none on its own stage."""
        if v in self.home:
            return None if self.home[v] == s else s
        stages = self.param_stages.get(v, ())
        return s if len(stages) > 1 else None

    # -- where parameters live -----------------------------------------------------------------
    def _param_stages(self) -> dict[Value, list[int]]:
        plan, prog = self.plan, self.prog
        need: dict[Value, set[int]] = {}
        hoist_params: dict[Value, frozenset[Value]] = {}

        def params_of(v: Value) -> frozenset[Value]:
            r = hoist_params.get(v)
            if r is None:
                i = prog.producer.get(v)
                if i is None:
                    r = frozenset({v})
                elif prog.ops[i].op_type in SHAPE_OPS:
                    r = frozenset()
                else:
                    op = prog.ops[i]
                    r = frozenset().union(*(params_of(x) for k, x in enumerate(op.inputs)
                                            if x is not None and
                                            (op.op_type, k) not in SHAPE_OPERANDS))
                hoist_params[v] = r
            return r

        def use(v: Value, s: int) -> None:
            i = prog.producer.get(v)
            if i is not None and plan.kind(i) != HOIST:
                return
            for p in params_of(v):
                need.setdefault(p, set()).add(s)

        for g in self.groups.values():
            for inp in g.inputs:
                if inp[0] in ("v", "h"):
                    use(inp[-1] if inp[0] == "h" else inp[1], g.stage)
        for i in prog.live_ops:
            if plan.kind(i) == POST:
                op = prog.ops[i]
                for k, x in enumerate(op.inputs):
                    if x is not None and (op.op_type, k) not in SHAPE_OPERANDS:
                        use(x, plan.stage[i])
        for v in prog.fn.returns:
            use(v, self.home.get(v, 0))
        return {p: sorted(need[p]) for p in prog.fn.params if p in need}

    def once_stage(self, v: Value) -> int:
        """The stage holding a value computed once (an update, a weight, a constant)."""
        if v in self.home:
            return self.home[v]
        stages = self.param_stages.get(v)
        return stages[0] if stages else 0

    # -- environment ---------------------------------------------------------------------------
    def get(self, v: Value, m: int | None, d: int, s: int) -> list[Value]:
        """The local values of ``v`` (microbatch ``m``) on replica ``d``, stage ``s``; sends
        it from its home stage when it lives elsewhere."""
        key = (v, m, d, s)
        vals = self.env.get(key)
        if vals is not None:
            return vals
        i = self.prog.producer.get(v)
        if i is not None and self.plan.kind(i) == HOIST:
            return self.hoist(v, d, s)
        src = self.env[(v, m, d, self.home[v])]
        return self.send(v, src, m, d, s)

    def send(self, v: Value, src: list[Value], m: int | None, d: int, s: int) -> list[Value]:
        names = self.namer(s, m, d)(base_name(v))
        vals = []
        for t, x in enumerate(src):
            y = Value(names[t])
            self.ops.append(Op("Send", [x], {"device": self.plan.device(d, s, t)}, [y]))
            vals.append(y)
        self.env[(v, m, d, s)] = vals
        return vals

    def const(self, arr: np.ndarray, hint: str, d: int, s: int) -> list[Value]:
        attr = DenseAttr.from_array(arr)
        key = (self.plan.const_key(attr), d, s)
        vals = self.hoisted.get(key)
        if vals is None:
            names = self.namer(s if self.plan.pp > 1 else None, None, d)(hint)
            vals = []
            for t in range(self.plan.tp):
                y = Value(names[t])
                self.ops.append(Op("Constant", [], {"value": attr,
                                                    "device": self.plan.device(d, s, t)}, [y]))
                vals.append(y)
            self.hoisted[key] = vals
        return vals

    def hoist(self, v: Value, d: int, s: int) -> list[Value]:
        """The local values of a batch-independent value on replica ``d``, stage ``s``,
        computed there on first use (once per distinct value)."""
        plan, prog = self.plan, self.prog
        key = (plan.canon(v), d, s)
        vals = self.hoisted.get(key)
        if vals is not None:
            return vals
        i = prog.producer.get(v)
        if i is None:
            vals = self.env[(v, None, d, s)]
            self.hoisted[key] = vals
            return vals
        op = prog.ops[i]
        arr = self.folded(v)
        if arr is not None:
            vals = self.const(arr, base_name(v), d, s)
            self.hoisted[key] = vals
            return vals
        local: dict[Value, list[Value]] = {}
        for k, x in enumerate(op.inputs):
            if x is not None and (op.op_type, k) not in SHAPE_OPERANDS:
                local[x] = self.hoist(x, d, s)
        name = self.namer(s if plan.pp > 1 else None, None, d)
        if not op.inputs:
            vals = []
            for t, n in enumerate(name(base_name(v))):
                y = Value(n)
                attrs = dict(op.attrs)
                attrs["device"] = plan.device(d, s, t)
                self.ops.append(Op(op.op_type, [], attrs, [y]))
                vals.append(y)
            local[v] = vals
        else:
            Emitter(plan, self.ops, local, name,
                    lambda arr, hint: self.const(arr, hint, d, s)).emit(op)
        for o in op.outputs:
            self.hoisted[(plan.canon(o), d, s)] = local[o]
        return self.hoisted[key]

    def folded(self, v: Value) -> np.ndarray | None:
        """The local value of a batch-independent value computed from constants and local
        shapes alone, when it has at most ``FOLD_LIMIT`` elements (shape arithmetic,
        position ids, a short causal mask), else ``None``."""
        plan, prog = self.plan, self.prog
        cid = plan.canon(v)
        if cid in self._folded:
            return self._folded[cid]
        i = prog.producer.get(v)
        out: np.ndarray | None = None
        op = prog.ops[i] if i is not None else None
        if op is None or plan.kind(i) != HOIST:  # type: ignore[arg-type]
            pass
        elif op.op_type in SHAPE_OPS:
            out = np.array(plan.local_shape(op.inputs[0]), dtype=np.int64)  # type: ignore[arg-type]
            if op.op_type == "Size":
                out = np.array(int(np.prod(out)), dtype=np.int64)
        elif op.op_type == "Constant" and set(op.attrs) <= {"value", "device"}:
            out = op.attrs["value"].array  # type: ignore[union-attr]
        elif op.inputs and NUMPY_RULES.get(op.op_type) is not None:
            args: list[np.ndarray | None] = []
            for k, x in enumerate(op.inputs):
                a = None if x is None else (plan.shape_operand(op, k) if (
                    op.op_type, k) in SHAPE_OPERANDS else self.folded(x))
                if x is not None and a is None:
                    break
                args.append(a)
            else:
                res = NUMPY_RULES.get(op.op_type)(op.op_type, tuple(args), prog.attrs(op),
                                                  len(op.outputs))
                res = [np.asarray(r) for r in res]
                if all(r.size <= FOLD_LIMIT for r in res):
                    for o, r in zip(op.outputs, res):
                        self._folded[plan.canon(o)] = r.astype(prog.type(o).dtype.np)
                    return self._folded[cid]
        self._folded[cid] = out
        return out

    # -- the program --------------------------------------------------------------------------
    def split_microbatches(self) -> None:
        """``Split`` each replica's batch inputs into ``K`` microbatches."""
        plan, sh = self.plan, self.plan.sh
        for p in self.prog.fn.params:
            if p not in sh.data or p not in self.param_stages:
                continue
            axis = sh.layout[p].axis(B)
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

    def hoist_all(self) -> None:
        """Compute every batch-independent value the stage functions and updates need."""
        plan, prog = self.plan, self.prog
        for g in self.groups.values():
            for inputs in (g.inputs, g.acc_inputs):
                for inp in inputs:
                    for d in range(plan.dp):
                        if inp[0] == "h":
                            self.hoist(inp[2], d, g.stage)
                        elif inp[0] == "c":
                            self.const(inp[2], inp[3], d, g.stage)
        for i in prog.live_ops:
            if plan.kind(i) != POST:
                continue
            op = prog.ops[i]
            for k, x in enumerate(op.inputs):
                j = prog.producer.get(x) if x is not None else None
                if j is not None and plan.kind(j) == HOIST and \
                        (op.op_type, k) not in SHAPE_OPERANDS:
                    for d in range(plan.dp):
                        self.hoist(x, d, plan.stage[i])  # type: ignore[arg-type]

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
                        lambda arr, hint, d=d: self.const(arr, hint, d, s)).emit(op)
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
        s = self.home[v]
        parts = [self.env[(v, m, d, s)][t] for m in range(plan.k)]
        if plan.k == 1:
            return parts[0]
        y = Value(self.namer(None, None, d)(base_name(v))[t])
        self.ops.append(Op("Concat", parts, {"axis": plan.sh.layout[v].axis(B)}, [y]))
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
