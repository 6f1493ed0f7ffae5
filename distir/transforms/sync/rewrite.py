"""The program rewrite of ``distir.transforms.synchronize``: the entry function's op list
with each gradient's all-reduce replaced as its ``VarSync`` says (see the strategies in
docs/synchronization.md). Invariants: the rewritten program keeps ``fn``'s parameters and
results (PowerSGD appends its state, ``distir.transforms.sync.powersgd``), and every value
an optimizer read keeps its name and meaning (the sum of the replicas' gradients, exactly
or within the strategy's precision)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from distir.ir.core import Function, Op, Value
from distir.ir.types import DType, TensorType
from distir.transforms.sync.plan import COMPRESS, Gradient, VarSync, check, servers

__all__ = ["Rewrite", "name"]


def name(v: Value | None, suffix: str) -> str:
    return f"{v.name if v is not None else 'v'}_{suffix}"


class Rewrite:
    """The entry function's op list rewritten by a checked plan: an all-reduce group at
    its last member's all-reduce; a hierarchical or PowerSGD reduction at the gradient's
    all-reduce; a PS or ZeRO reduction there and its update at the first replica's
    optimizer op (the other replicas' are dropped)."""

    def __init__(self, f: Function, grads: tuple[Gradient, ...],
                 plan: tuple[VarSync, ...]) -> None:
        self.f, self.grads, self.plan = f, grads, plan
        self.pos = {id(op): i for i, op in enumerate(f.ops)}
        check(grads, plan, self.pos)
        self.ops: list[Op] = []
        self.sent: dict[int, list[Value]] = {}  # gradient -> what each replica sends
        self.params: list[Value] = []  # appended parameters (PowerSGD's state)
        self.returns: list[Value] = []  # appended results (its next state)

    def op(self, op_type: str, ins: Sequence[Value | None], attrs: dict[str, Any] | None,
           names: Sequence[str] | None = None, outs: Sequence[Value] | None = None,
           ) -> tuple[Value, ...]:
        if outs is None:
            outs = [Value(nm) for nm in names or ()]
        self.ops.append(Op(op_type, ins, attrs, outs))
        return tuple(outs)

    def run(self) -> Function:
        from distir.transforms.sync.powersgd import emit_powersgd

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
            elif p.kind in ("ps", "zero"):
                ups = sorted(self.pos[id(u)] for u in gr.updates)
                at_update[ups[0]] = gr
                skip.update(ups[1:])
        reduced: dict[int, tuple[Value, ...]] = {}
        for i, op in enumerate(f.ops):
            red = at_reduce.get(i)
            if red is not None:
                gr, p = red, plan[red.index]
                xs = [self.view(v, chain) for v, chain in zip(gr.allreduce.inputs, gr.views)]
                to = COMPRESS.get(p.compress or "")
                if to is not None:
                    xs = [self.op("Cast", [x], {"to": to}, [name(x, str(p.compress))])[0]
                          for x in xs]
                self.sent[gr.index] = xs
                if p.kind == "allreduce":
                    if last_of[p.group] == i:
                        self.bucket(members[p.group])
                elif p.kind == "hierarchical":
                    self.hierarchical(gr, p)
                elif p.kind == "powersgd":
                    emit_powersgd(self, gr, p)
                else:
                    reduced[gr.index] = self.reduce(gr, p)
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
        rtypes = f.return_types
        if rtypes is not None and self.returns:
            extra = [v.type for v in self.returns]
            assert all(t is not None for t in extra)
            rtypes = (*rtypes, *extra)  # type: ignore[arg-type]
        out = Function(f.name, (*f.params, *self.params), self.ops,
                       (*f.returns, *self.returns), rtypes, f.loc, f.end_loc)
        out.initializers = dict(f.initializers)
        return out

    def view(self, x: Value | None, chain: tuple[Op, ...]) -> Value:
        """``x`` (a replica's unreduced gradient) through that replica's view ops."""
        assert x is not None
        for c in chain:
            x = self.op(c.op_type, (x, *c.inputs[1:]), dict(c.attrs),
                        [name(c.outputs[0], "local")])[0]
        return x

    def finals(self, gr: Gradient) -> list[Value]:
        """Per replica, the value its summed gradient is written to: the optimizer's
        input itself, or (compressed) a 16-bit value that ``cast_back`` casts into it."""
        comp = self.plan[gr.index].compress
        return [Value(name(r, comp)) if comp else r for r in gr.targets]

    def cast_back(self, gr: Gradient, finals: Sequence[Value]) -> None:
        if self.plan[gr.index].compress:
            for v, r in zip(finals, gr.targets):
                self.op("Cast", [v], {"to": gr.type.dtype}, outs=[r])

    def bucket(self, grads: list[Gradient]) -> None:
        """One collective for the group (``MPIAllreduce`` for a lone gradient), its
        results cast back where compressed, bound to the original all-reduce results."""
        ins: list[Value] = []
        outs: list[Value] = []
        for gr in grads:
            ins.extend(self.sent[gr.index])
            outs.extend(self.finals(gr))
        if len(grads) == 1:
            self.op("MPIAllreduce", ins, None, outs=outs)
        else:
            self.op("MPIAllreduceBucket", ins, {"tensors": len(grads)}, outs=outs)
        k = 0
        for gr in grads:
            n = len(gr.targets)
            self.cast_back(gr, outs[k:k + n])
            k += n

    def hierarchical(self, gr: Gradient, p: VarSync) -> None:
        """Reduce to each node's first replica, all-reduce across those leaders,
        broadcast within each node (a node of one replica skips both)."""
        xs = self.sent[gr.index]
        finals = self.finals(gr)
        nodes: dict[int, list[int]] = {}
        for j, d in enumerate(gr.devices):
            nodes.setdefault(d // p.node_size, []).append(j)
        groups = list(nodes.values())
        sums: list[Value] = []
        for js in groups:
            if len(js) == 1:
                sums.append(xs[js[0]])
            else:
                sums.append(self.op("MPIReduce", [xs[j] for j in js],
                                    {"device": gr.devices[js[0]]},
                                    [name(finals[js[0]], "node")])[0])
        if len(groups) > 1:
            outs = [finals[js[0]] if len(js) == 1 else Value(name(finals[js[0]], "leader"))
                    for js in groups]
            sums = list(self.op("MPIAllreduce", sums, None, outs=outs))
        for js, s in zip(groups, sums):
            if len(js) > 1:
                self.op("MPIBroadcast", [s], {"devices": tuple(gr.devices[j] for j in js)},
                        outs=[finals[j] for j in js])
        self.cast_back(gr, finals)

    def reduce(self, gr: Gradient, p: VarSync) -> tuple[Value, ...]:
        """PS: the sum on the server (a partitioned PS: each shard's sum on its server);
        ZeRO-2: each replica's shard of the sum; ZeRO-1: each replica's shard of the
        all-reduced sum. Cast back where compressed."""
        xs = self.sent[gr.index]
        rs = gr.targets
        n = len(xs)
        outs: tuple[Value, ...]
        if p.kind == "ps" and p.shards > 1:
            parts = [self.op("Split", [x], {"axis": p.axis, "num_outputs": p.shards},
                             [name(x, f"shard{k}") for k in range(p.shards)]) for x in xs]
            outs = tuple(self.op("MPIReduce", [pt[k] for pt in parts], {"device": dev},
                                 [name(rs[0], f"ps{k}")])[0]
                         for k, dev in enumerate(servers(gr, p)))
        elif p.kind == "ps":
            outs = self.op("MPIReduce", xs, {"device": p.device}, [name(rs[0], "ps")])
        elif p.stage == 2:
            outs = self.op("MPIReduceScatter", xs, {"axis": 0},
                           [name(r, "shard") for r in rs])
        else:
            sums = self.op("MPIAllreduce", xs, None, [name(r, "sum") for r in rs])
            outs = tuple(self.op("Split", [s], {"axis": 0, "num_outputs": n},
                                 [name(s, f"part{k}") for k in range(n)])[j]
                         for j, s in enumerate(sums))
        if p.compress:
            outs = tuple(self.op("Cast", [o], {"to": gr.type.dtype}, [name(o, "dec")])[0]
                         for o in outs)
        return outs

    def ps_update(self, gr: Gradient, p: VarSync, reduced: tuple[Value, ...]) -> None:
        """The server's optimizer op on the sum, each of its results broadcast to every
        replica (bound to that replica's original optimizer results). Partitioned: each
        server updates its shard (the optimizer's inputs shaped like the weight split
        alike), the shards are broadcast and every replica concatenates them."""
        if p.shards == 1:
            up = gr.updates[gr.devices.index(p.device)]
            ins = list(up.inputs)
            ins[1] = reduced[0]
            new = self.op(up.op_type, ins, dict(up.attrs), [name(o, "ps") for o in up.outputs])
            for k, v in enumerate(new):
                self.op("MPIBroadcast", [v], {"devices": gr.devices},
                        outs=[u.outputs[k] for u in gr.updates])
            return
        shard_outs: list[tuple[Value, ...]] = []
        for k, dev in enumerate(servers(gr, p)):
            up = gr.updates[gr.devices.index(dev)]
            ins2: list[Value | None] = []
            for i, x in enumerate(up.inputs):
                if i == 1:
                    ins2.append(reduced[k])
                elif x is not None and i in gr.sharded:
                    ins2.append(self.op("Split", [x], {"axis": p.axis, "num_outputs": p.shards},
                                        [name(x, f"ps{k}_{m}") for m in range(p.shards)])[k])
                else:
                    ins2.append(x)
            shard_outs.append(self.op(up.op_type, ins2, dict(up.attrs),
                                      [name(o, f"ps{k}") for o in up.outputs]))
        for o in range(len(gr.updates[0].outputs)):
            copies = [self.op("MPIBroadcast", [s[o]], {"devices": gr.devices},
                              [name(s[o], f"to{d}") for d in gr.devices])
                      for s in shard_outs]
            for j, u in enumerate(gr.updates):
                self.op("Concat", [c[j] for c in copies], {"axis": p.axis},
                        outs=[u.outputs[o]])

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
                                    [name(x, f"part{k}") for k in range(n)])
                    ins.append(parts[j])
                else:
                    ins.append(x)
            new.append(self.op(up.op_type, ins, dict(up.attrs),
                               [name(o, "shard") for o in up.outputs]))
        for k in range(len(gr.updates[0].outputs)):
            self.op("MPIAllgather", [s[k] for s in new], {"axis": 0},
                    outs=[u.outputs[k] for u in gr.updates])


def state_param(nm: str, dtype: DType, shape: tuple[int, ...], device: int) -> Value:
    """A new typed parameter (PowerSGD's state)."""
    return Value(nm, TensorType(dtype, shape, device))
