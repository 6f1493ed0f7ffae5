"""Per-rank projection: one straight-line program per device, with communication paired.

``project(fn)`` runs ``fn`` through the one interpreter loop with abstract values (types
from the ``TypeInterpreter``, whose memo table is shared), inlining every call, and sends
each op to the program of the device it runs on. The result is what the backend executes,
so what is simulated is what runs.

Invariants of a ``Projection``:

- ``programs[d].fn`` is a flat function (no calls) holding, in global program order, exactly
  the ops that touch device ``d``. Every value has its ``type`` set (dtype, static shape,
  device ``d``), so a backend can allocate and precompute before anything runs.
- Its parameters are the entry function's parameters placed on ``d`` (global positions in
  ``param_index``); its returns are the entry's results placed on ``d`` (global positions in
  ``return_index``).
- Values the type interpreter knows concretely (shapes, small constants) are folded: the op
  that computed them becomes ``Constant(value=..., device=d)`` ops, and constants that end
  up unused are dropped. Communication ops are never folded.
- Communication ops appear in the program of every participant, in the same global order,
  each with ``seq`` (its global index) and ``group`` (the sorted tuple of participating
  devices) attributes. Their per-rank forms take and give only the local tensors:

  ==================  =====================  ==========================================
  global op           on a participant       attributes besides ``seq``/``group``
  ==================  =====================  ==========================================
  ``Send``            ``Send(x)`` -> ()  on the source; ``() -> Recv()`` on the
                      destination            ``device``: the peer
  ``MPIAllreduce``    ``x -> y``             ``order``: the devices in input order
  ``MPIAllreduce``    ``x1..xk -> y1..yk``   ``order`` (of a member's inputs), ``tensors``
  ``Bucket``          (its tensor of each
                      member, in order)
  ``MPIAllgather``    ``x -> y``             ``order``, ``axis``, ``sizes`` (each
                                             input's size along ``axis``, in order)
  ``MPIReduceScatter````x -> y``             ``order``, ``axis``
  ``MPIBroadcast``    root: ``x -> [y]``;    ``root``, ``devices``
                      others: ``() -> y``
  ``MPIScatter``      as ``MPIBroadcast``    ``root``, ``devices``, ``axis``
  ``MPIGather``       sources: ``x -> [y]``;  ``order``, ``device`` (the destination),
                      a destination outside  ``axis``, ``sizes``
                      the sources: ``() -> y``
  ``MPIReduce``       as ``MPIGather``       ``order``, ``device``
  ==================  =====================  ==========================================

  A communication op with a single participant becomes ``Identity`` ops (a ``Peer*`` op
  of a program that writes one tensor-parallel rank for all, ``distir.analysis.replicas``,
  too; its rank group is listed in ``groups``).
- Because every rank runs its communication ops in one global order and each completes
  only when all its participants have joined, no schedule can deadlock: the earliest
  unfinished op always has all its participants waiting on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from distir.analysis.api import _input_values
from distir.analysis.interpreter import Interpreter, TypeInterpreter
from distir.analysis.replicas import PEER_OPS
from distir.analysis.values import Concrete, type_of
from distir.errors import PlacementError, UnsupportedError
from distir.ir.core import Function, Module, Op, Value
from distir.ir.schemas import COMM_OPS
from distir.ir.types import DenseAttr, ScalarType, TensorType, Type

__all__ = ["RankProgram", "Projection", "project", "comm_ops", "check_pairing"]


@dataclass(frozen=True, slots=True)
class RankProgram:
    """The program of one device. ``fn`` is flat and fully typed; ``param_index[i]`` is the
    entry parameter that ``fn.params[i]`` stands for, ``return_index[j]`` the entry result
    that ``fn.returns[j]`` gives."""

    device: int
    fn: Function
    param_index: tuple[int, ...]
    return_index: tuple[int, ...]

    @property
    def num_comm(self) -> int:
        """The number of communication ops this device takes part in."""
        return sum(1 for op in self.fn.ops if "seq" in op.attrs)


@dataclass(frozen=True, slots=True)
class Projection:
    """One program per device (``programs[d]`` for device ``d``; a device with nothing to do
    gets an empty one), the device groups the communication uses (sorted tuples, in order of
    first use), and the entry's parameter and result types."""

    name: str
    programs: tuple[RankProgram, ...]
    groups: tuple[tuple[int, ...], ...]
    param_types: tuple[Type, ...]
    return_types: tuple[Type, ...]
    num_comm: int

    @property
    def world_size(self) -> int:
        return len(self.programs)


class _Slot:
    """What the projector binds to a source value: the projected value and its abstract
    value (a ``Type`` or ``Concrete``)."""

    __slots__ = ("value", "abs")

    def __init__(self, value: Value, abs: Any) -> None:
        self.value = value
        self.abs = abs


def _tensor(abs: Any) -> TensorType:
    t = type_of(abs)
    if not isinstance(t, TensorType):
        raise UnsupportedError(f"a collective moves tensors, not {t}")
    return t


def _device_of(t: Type, what: str) -> int:
    if isinstance(t, TensorType | ScalarType):
        return t.device
    raise UnsupportedError(f"{what} has type {t}; projection needs each value on one device")


_UNWRITTEN = Value("unwritten")
"""The value of every result of an op on a device ``project(devices=...)`` leaves out."""


class _Projector(Interpreter):
    """The loop with ``_Slot`` values: ``eval_op`` types the op with the shared
    ``TypeInterpreter`` and appends its per-rank form to the programs of its devices; calls
    run their callee in place (the base ``eval_call``), which inlines them."""

    def __init__(self, types: TypeInterpreter, devices: frozenset[int] | None = None,
                 ) -> None:
        super().__init__()
        self.types = types
        self.ops: dict[int, list[Op]] = {}
        self.seq = 0
        self.groups: dict[tuple[int, ...], None] = {}
        self.devices = devices
        """The devices whose programs are written (``None``: all)."""
        self.left_out: set[int] = set()
        """Devices with ops not written (``devices``)."""

    def emit(self, device: int, op: Op) -> None:
        if self.devices is None or device in self.devices:
            self.ops.setdefault(device, []).append(op)
        else:
            self.left_out.add(device)

    def new_value(self, src: Value, abs: Any) -> _Slot:
        t = type_of(abs)
        return _Slot(Value(src.name, t, src.loc), abs)

    def eval_op(self, op: Op, args: tuple) -> tuple:
        abs_args = tuple(None if a is None else a.abs for a in args)
        outs_abs = self.types.eval_op(op, abs_args)
        if self.devices is not None and outs_abs and op.op_type not in COMM_OPS:
            # An op of a device whose program is not written: its results are only typed
            # (the type interpreter has checked its placement).
            t = type_of(outs_abs[0])
            if isinstance(t, TensorType | ScalarType) and t.device not in self.devices:
                self.left_out.add(t.device)
                return tuple(_Slot(_UNWRITTEN, a) for a in outs_abs)
        outs = tuple(self.new_value(v, a) for v, a in zip(op.outputs, outs_abs))
        if op.op_type in COMM_OPS:
            self.comm(op, args, outs)
        else:
            self.local(op, args, outs)
        return outs

    def local(self, op: Op, args: tuple, outs: tuple) -> None:
        devs: set[int] = set()
        for s in (*args, *outs):
            if s is not None:
                t = type_of(s.abs)
                # (the common case first: the message is formatted only for an error)
                devs.add(t.device if isinstance(t, TensorType | ScalarType) else
                         _device_of(t, f"%{s.value.name}"))
        if not devs:
            devs.add(int(self.attrs_of(op).get("device", 0)))
        if len(devs) != 1:
            raise PlacementError(f"{op.op_type} touches devices {sorted(devs)}; only "
                                 "communication ops may span devices")
        (dev,) = devs
        if outs and all(isinstance(o.abs, Concrete) for o in outs):
            for o in outs:  # known statically: a constant of the program
                self.emit(dev, Op("Constant", (), {"value": DenseAttr.from_array(o.abs.value),
                                                   "device": dev}, (o.value,), loc=op.loc))
            return
        self.emit(dev, Op(op.op_type, [None if a is None else a.value for a in args],
                          dict(op.attrs), [o.value for o in outs], loc=op.loc))

    def comm(self, op: Op, args: tuple, outs: tuple) -> None:
        kind = op.op_type
        in_devs = [_device_of(type_of(a.abs), f"input {i} of {kind}")
                   for i, a in enumerate(args)]
        out_devs = [_device_of(type_of(o.abs), f"result {i} of {kind}")
                    for i, o in enumerate(outs)]
        if kind == "MPIAllreduceBucket":
            self.bucket(op, args, outs, in_devs)
            return
        for what, devs in (("inputs", in_devs), ("results", out_devs)):
            if len(set(devs)) != len(devs):
                raise PlacementError(f"{kind} has two {what} on one device ({devs}); a "
                                     "collective takes one tensor per device")
        participants = sorted(set(in_devs) | set(out_devs))
        if kind in PEER_OPS:  # rank 0's part: its group joins
            d = in_devs[0]
            k = int(self.attrs_of(op)["peers"])
            if k > 1:
                self.groups[tuple(range(d, d + k))] = None
        if len(participants) == 1:  # nothing moves
            (d,) = participants
            for o in outs:
                self.emit(d, Op("Identity", (args[0].value,), None, (o.value,), loc=op.loc))
            return
        group = tuple(participants)
        self.groups[group] = None
        seq = self.seq
        self.seq += 1
        base: dict[str, Any] = {"seq": seq, "group": group}
        ins_on = {d: a.value for d, a in zip(in_devs, args)}
        outs_on = {d: o.value for d, o in zip(out_devs, outs)}
        if kind == "Send":
            src, dst = in_devs[0], out_devs[0]
            self.emit(src, Op("Send", (ins_on[src],), {**base, "device": dst}, (), loc=op.loc))
            self.emit(dst, Op("Recv", (), {**base, "device": src}, (outs_on[dst],),
                              loc=op.loc))
            return
        given = self.attrs_of(op)
        attrs = dict(base)
        if kind in ("MPIBroadcast", "MPIScatter"):
            attrs["root"] = in_devs[0]
            attrs["devices"] = tuple(int(d) for d in given["devices"])
        else:
            attrs["order"] = tuple(in_devs)
        if kind in ("MPIGather", "MPIReduce"):
            attrs["device"] = int(given["device"])
        if kind in ("MPIAllgather", "MPIReduceScatter", "MPIScatter", "MPIGather"):
            rank = len(getattr(type_of(args[0].abs), "shape", ()))
            axis = int(given.get("axis", 0))
            attrs["axis"] = axis + rank if axis < 0 else axis
        if kind in ("MPIAllgather", "MPIGather"):
            attrs["sizes"] = tuple(_tensor(a.abs).shape[attrs["axis"]] for a in args)
        for d in participants:
            x = ins_on.get(d)
            y = outs_on.get(d)
            self.emit(d, Op(kind, () if x is None else (x,), attrs, () if y is None else (y,),
                            loc=op.loc))


    def bucket(self, op: Op, args: tuple, outs: tuple, in_devs: list[int]) -> None:
        """An ``MPIAllreduceBucket``: on each device, its tensor of every member, in member
        order (the type rule has checked that every member lists the same devices)."""
        k = int(self.attrs_of(op)["tensors"])
        n = len(args) // k
        order = tuple(in_devs[:n])
        if n == 1:  # nothing moves
            for a, o in zip(args, outs):
                self.emit(order[0], Op("Identity", (a.value,), None, (o.value,), loc=op.loc))
            return
        group = tuple(sorted(order))
        self.groups[group] = None
        attrs: dict[str, Any] = {"seq": self.seq, "group": group, "order": order,
                                 "tensors": k}
        self.seq += 1
        for j, d in enumerate(order):
            self.emit(d, Op("MPIAllreduceBucket", [args[m * n + j].value for m in range(k)],
                            attrs, [outs[m * n + j].value for m in range(k)], loc=op.loc))


def _prune_constants(ops: list[Op], returns: Sequence[Value]) -> list[Op]:
    """Drop ``Constant`` ops whose results nothing uses (left by folding)."""
    used: set[int] = {id(v) for v in returns}
    for op in ops:
        for v in op.inputs:
            if v is not None:
                used.add(id(v))
    return [op for op in ops
            if not (op.op_type == "Constant" and not any(id(v) in used for v in op.outputs))]


def project(fn: Function | Module, input_types: Sequence[Type | None] | None = None,
            *, world_size: int | None = None,
            devices: Sequence[int] | None = None) -> Projection:
    """The per-device programs of ``fn`` (see the module docstring for their invariants).

    ``input_types`` overrides the declared parameter types (as for ``infer_types``);
    ``world_size``, when given, pads with empty programs up to that many devices and must
    cover every device the program uses. ``devices``, when given, writes the programs of
    those devices alone (the others hold their parameters and no op), at a fraction of the
    cost: what a caller that reads a few devices' programs needs.
    """
    if isinstance(fn, Module):
        fn = fn.entry
    types = TypeInterpreter()
    args_abs = _input_values(fn, input_types)
    types.run(fn, args_abs)  # checks annotations and placement, and fills the memo table
    proj = _Projector(types, None if devices is None else frozenset(devices))
    params = [_Slot(Value(p.name, type_of(a), p.loc), a) for p, a in zip(fn.params, args_abs)]
    results = proj.run(fn, params)

    param_devs = [_device_of(type_of(s.abs), f"parameter %{p.name}")
                  for p, s in zip(fn.params, params)]
    ret_devs = [_device_of(type_of(s.abs), f"result {i} of @{fn.name}")
                for i, s in enumerate(results)]
    used = set(proj.ops) | proj.left_out | set(param_devs) | set(ret_devs)
    n = max(used, default=0) + 1
    if world_size is not None:
        if world_size < n:
            raise PlacementError(f"@{fn.name} uses device {n - 1}, but the world size is "
                                 f"{world_size}: run it on at least {n} devices")
        n = world_size
    programs = []
    for d in range(n):
        p_idx = tuple(i for i, pd in enumerate(param_devs) if pd == d)
        r_idx = tuple(i for i, rd in enumerate(ret_devs) if rd == d)
        rets = [results[i].value for i in r_idx]
        ops = _prune_constants(proj.ops.get(d, []), rets)
        rfn = Function(f"{fn.name}.rank{d}", [params[i].value for i in p_idx], ops, rets)
        programs.append(RankProgram(d, rfn, p_idx, r_idx))
    return Projection(fn.name, tuple(programs), tuple(proj.groups),
                      tuple(type_of(s.abs) for s in params),
                      tuple(type_of(s.abs) for s in results), proj.seq)


def comm_ops(program: RankProgram) -> list[Op]:
    """The communication ops of one device's program, in order."""
    return [op for op in program.fn.ops if "seq" in op.attrs]


def check_pairing(proj: Projection) -> None:
    """Check that every communication op appears, with the same group and kind, in the
    program of each of its participants, and that every device meets its operations in
    increasing ``seq`` order. Raises ``UnsupportedError`` naming the first mismatch."""
    seen: dict[int, tuple[str, tuple[int, ...], set[int]]] = {}
    for prog in proj.programs:
        last = -1
        for op in comm_ops(prog):
            attrs: dict[str, Any] = op.attrs
            seq, group = int(attrs["seq"]), tuple(attrs["group"])
            if seq <= last:
                raise UnsupportedError(f"device {prog.device} meets communication {seq} after "
                                       f"{last}")
            last = seq
            kind = "Send" if op.op_type == "Recv" else op.op_type
            entry = seen.setdefault(seq, (kind, group, set()))
            if entry[0] != kind or entry[1] != group:
                raise UnsupportedError(f"communication {seq} is {entry[0]} over {entry[1]} on "
                                       f"one device and {kind} over {group} on device "
                                       f"{prog.device}")
            entry[2].add(prog.device)
    for seq, (kind, group, devs) in sorted(seen.items()):
        if devs != set(group):
            raise UnsupportedError(f"communication {seq} ({kind} over {group}) is missing "
                                   f"from devices {sorted(set(group) - devs)}")
