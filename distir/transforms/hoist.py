"""Part of the builder tower (``distir.transforms.tower``, ``dtp`` before the spmd passes).

The state shared by the top-level builder: where each value lives, names, transfers,
and the batch-independent values computed once per device.

A batch-independent value (constant, local target shape, causal mask, weight-only op) is
computed on every device that needs it, once per distinct value: values are keyed by
``Plan.canon``, so the masks and shape constants of all layers of a stage collapse to one.
When such a value follows from constants and local shapes alone and is small
(``FOLD_LIMIT`` elements), it is written as a ``Constant`` instead of the ops computing it
(the exporter's run-time shape chains disappear).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import numpy as np

from distir.analysis.rules import NUMPY_RULES, load_rules
from distir.ir.core import Op, Value
from distir.ir.types import DenseAttr
from distir.transforms.emit import Emitter, base_name
from distir.transforms.plan import Plan
from distir.transforms.program import SHAPE_OPERANDS, SHAPE_OPS
from distir.transforms.stages import StageFunction
from distir.transforms.structure import HOIST, POST

__all__ = ["BuilderBase", "FOLD_LIMIT"]

FOLD_LIMIT = 256
"""Batch-independent values computed from constants with at most this many elements are
written as constants."""

Key = tuple  # (value, microbatch or None, replica, stage)


class BuilderBase:
    """Environment, names, transfers and hoisted values of the top-level function."""

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
        self.early: set[Value] = set()  # gradients reduced inside the schedule
        # Inside @replica (compose.py), the value that names each (stage, rank)'s device.
        self._anchors: dict[tuple[int, int], Value] | None = None
        # Inside a function written per replica (compose.py): makes a new constant.
        self.outline: Callable[[list[DenseAttr], tuple, str], list[Value]] | None = None
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
            f"_dp{d}" if plan.dp > 1 and self.outline is None else "")
        ends = [suffix + r for r in plan.rank_suffixes()]
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
        anchors = self._anchors
        for t, x in enumerate(src):
            y = Value(names[t])
            if anchors is not None:  # inside @replica: to where a value of rank t is
                self.ops.append(Op("Send", [x, anchors[(s, t)]], None, [y]))
            else:
                self.ops.append(Op("Send", [x], {"device": self.plan.device(d, s, t)}, [y]))
            vals.append(y)
        self.env[(v, m, d, s)] = vals
        return vals

    def const(self, arr: np.ndarray, hint: str, d: int, s: int,
              per_rank: bool = False) -> list[Value]:
        """The local values of a constant on replica ``d``, stage ``s`` (``ConstFn``)."""
        attr = DenseAttr.from_array(arr)
        key = (self.plan.const_key(attr, per_rank), d, s)
        vals = self.hoisted.get(key)
        if vals is None:
            ranks = self.plan.ranks()
            attrs = [DenseAttr.from_array(arr[t, ...]) for t in ranks] if per_rank else \
                [attr] * len(ranks)
            if self.outline is not None:  # inside a function written per replica
                return self.outline(attrs, key, hint)
            vals = self._constants(attrs, key, hint, self.ops)
        return vals

    def _constants(self, attrs: list[DenseAttr], key: tuple, hint: str,
                   ops: list[Op]) -> list[Value]:
        """``Constant``s of ``attrs`` (one per rank) on the ranks of ``key``'s replica and
        stage, appended to ``ops`` and recorded as hoisted."""
        _, d, s = key
        names = self.namer(s if self.plan.pp > 1 else None, None, d)(hint)
        vals = []
        for t in self.plan.ranks():
            y = Value(names[t])
            ops.append(Op("Constant", [], {"value": attrs[t],
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
                    partial(self.const, d=d, s=s)).emit(op)
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
            out = plan.shape_value(op)
        elif op.op_type == "Constant" and set(op.attrs) <= {"value", "device"}:
            out = op.attrs["value"].array  # type: ignore[union-attr]
        elif op.inputs and (rule := NUMPY_RULES.get(op.op_type)) is not None and \
                self._small(op):
            args: list[np.ndarray | None] = []
            for k, x in enumerate(op.inputs):
                a = None if x is None else (plan.shape_operand(op, k) if (
                    op.op_type, k) in SHAPE_OPERANDS else self.folded(x))
                if x is not None and a is None:
                    break
                args.append(a)
            else:
                res = [np.asarray(r) for r in rule(op.op_type, tuple(args), prog.attrs(op),
                                                   len(op.outputs))]
                if all(r.size <= FOLD_LIMIT for r in res):
                    for o, r in zip(op.outputs, res, strict=True):
                        self._folded[plan.canon(o)] = r.astype(prog.type(o).dtype.np)
                    return self._folded[cid]
        self._folded[cid] = out
        return out

    def _small(self, op: Op) -> bool:
        """Whether every local result of ``op`` has at most ``FOLD_LIMIT`` elements, as far
        as its shape and layout tell (so a large batch-independent value, such as a causal mask of
        a long sequence, is not computed only to be found too large to fold)."""
        for o in op.outputs:
            try:
                n = math.prod(self.plan.local_shape(o))
            except KeyError:  # a value of no known shape: computed, as before
                continue
            if n > FOLD_LIMIT:
                return False
        return True

    def hoist_all(self) -> None:
        """Compute every batch-independent value the stage functions and updates need."""
        plan, prog = self.plan, self.prog
        for g in self.groups.values():
            for inputs in (g.inputs, g.acc_inputs):
                for inp in inputs:
                    for d in range(plan.written):
                        if inp[0] == "h":
                            self.hoist(inp[2], d, g.stage)
                        elif inp[0] in ("c", "r"):
                            self.const(inp[2], inp[3], d, g.stage, inp[0] == "r")
        for i in prog.live_ops:
            if plan.kind(i) != POST:
                continue
            op = prog.ops[i]
            for k, x in enumerate(op.inputs):
                j = prog.producer.get(x) if x is not None else None
                if j is not None and (op.op_type, k) not in SHAPE_OPERANDS and \
                        plan.kind(j) == HOIST:
                    for d in range(plan.written):
                        self.hoist(x, d, plan.stage[i])  # type: ignore[arg-type]
