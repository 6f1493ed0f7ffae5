"""One D/T/P/K configuration of an analyzed function: checks, devices, stages, local shapes.

``Analysis`` (the sequential program, its sharding and structure) does not depend on the
degrees and is computed once per function; ``Plan`` applies a configuration to it: it
refuses impossible configurations with a ``TransformError`` that names the constraint and
the numbers, maps ``(replica d, stage s, rank t)`` to a device and gives every op its stage.

Device mapping: ``device = (d * pp + s) * tp + t``, so the ``tp`` ranks of a stage are
adjacent (they exchange the most data), then the stages of a replica, then the replicas.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from distir._util import no_gc
from distir.errors import TransformError
from distir.ir.core import Function, Module, Op, Value
from distir.ir.types import DenseAttr, TensorType
from distir.transforms.layout import B, T, batch_offset, is_batch, local_shape
from distir.transforms.partition import StagePartition
from distir.transforms.program import SHAPE_OPS, Program
from distir.transforms.schedule import SCHEDULES
from distir.transforms.sharding import Sharding
from distir.transforms.structure import Structure

__all__ = ["Analysis", "Plan", "analyze"]

# The outcome of ``Plan._check_tensor`` per sharding (an analysis' own, or its variant for
# a tp) and (tp, microbatch splits): the same for every configuration sharing them.
_TENSOR_CHECKS: weakref.WeakKeyDictionary[Sharding, dict[tuple[int, int],
                                                          TransformError | None]] = \
    weakref.WeakKeyDictionary()
# The outcome of ``Plan._ranks_alike`` per sharding (of a tp).
_RANKS_ALIKE: weakref.WeakKeyDictionary[Sharding, bool] = weakref.WeakKeyDictionary()


@dataclass(frozen=True, slots=True)
class Analysis:
    """What the transforms know of a sequential function, for every configuration."""

    prog: Program
    sharding: Sharding
    structure: Structure
    partition: StagePartition

    @property
    def fn(self) -> Function:
        return self.prog.fn


def analyze(fn: Function | Module | Program, batch_inputs: Sequence[str] | None = None,
            weights: Sequence[str] = (), hardware: Any = None) -> Analysis:
    """Analyze ``fn`` once; pass the result to ``dtp`` for each configuration.

    ``batch_inputs`` names the parameters whose axis 0 is the batch; by default they are
    found from the function (see ``Sharding``). ``weights`` names parameters that are
    weights although no initializer binds them (a function whose large initializers were
    left out, as the grid search's are): they are never batch inputs. ``hardware`` (a
    ``Hardware`` or a profile's name or path; default ``partition.PROFILE``) weighs the ops
    where pipeline stages are balanced by cost: the profile to be simulated, since the
    ratios of its ops' costs decide the cuts. A ``Program`` of ``fn`` is used as it is."""
    if isinstance(fn, Module):
        fn = fn.entry
    if isinstance(batch_inputs, str):
        batch_inputs = [batch_inputs]
    if hardware is not None:
        from distir.analysis.hardware import load_hardware

        hardware = load_hardware(hardware)
    with no_gc():
        prog = fn if isinstance(fn, Program) else Program(fn)
        sh = Sharding(prog, batch_inputs, weights)
        st = Structure(prog, sh)
        return Analysis(prog, sh, st, StagePartition(st, hardware))


def as_analysis(fn: Function | Module | Program | Analysis,
                batch_inputs: Sequence[str] | None, hardware: Any, caller: str) -> Analysis:
    """``fn`` analysed (a ``Module``'s entry), or ``fn`` itself when it is an ``Analysis``,
    which already holds its batch inputs and hardware: passing them too is refused in one
    line naming ``caller``."""
    if isinstance(fn, Module):
        fn = fn.entry
    if isinstance(fn, Analysis):
        for name, v in (("batch_inputs", batch_inputs), ("hardware", hardware)):
            if v is not None:
                raise TransformError(f"{caller}: pass {name} to analyze(), not with an "
                                     "Analysis")
        return fn
    return analyze(fn, list(batch_inputs) if batch_inputs is not None else None,
                   hardware=hardware)


def check_batch(an: Analysis, dp: int, k: int) -> None:
    """Refuse ``dp`` replicas of ``k`` microbatches that the batch cannot be split into,
    naming the batch input (shared by both transforms)."""
    if dp * k == 1:
        return
    sh, prog = an.sharding, an.prog
    if sh.batch_size is None:
        raise TransformError(f"dp={dp} and microbatches={k} need a batch to split, but "
                             f"@{prog.fn.name} has no batch input (an input that is "
                             "not bound to an initializer, or a parameter used as "
                             "MatMul's first operand, Gather's indices or a loss's "
                             "target); name it with batch_inputs=[...] (--batch-input)")
    if sh.batch_error is not None:
        raise TransformError(sh.batch_error)
    bsz = sh.batch_size
    x = next(p for p in prog.fn.params if p in sh.data)
    if bsz % dp:
        raise TransformError(f"dp={dp} does not divide the batch size {bsz} (dimension 0 "
                             f"of %{x.name})")
    if (bsz // dp) % k:
        raise TransformError(f"microbatches={k} does not divide the per-replica batch "
                             f"{bsz // dp} (batch size {bsz} / dp={dp})")


def check_layers(an: Analysis, pp: int) -> None:
    """Refuse more pipeline stages than forward ops that run per microbatch."""
    if pp == 1:  # one stage holds the whole program
        return
    n = int(an.partition.fwd_prefix[-1])
    if pp > n:
        raise TransformError(f"pp={pp} is more pipeline stages than the {n} forward op"
                             f"{'s' * (n != 1)} of @{an.prog.fn.name} that run"
                             f"{'s' * (n == 1)} per microbatch")


class Plan:
    """A checked configuration: degrees, devices, op stages, local shapes, canonical keys
    of the batch-independent values (equal keys are computed once per device)."""

    def __init__(self, an: Analysis, dp: int, tp: int, pp: int, k: int, schedule: str,
                 one_replica: bool = False, one_rank: bool = False) -> None:
        for name, v in (("dp", dp), ("tp", tp), ("pp", pp), ("microbatches", k)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise TransformError(f"{name} must be a positive integer, got {v!r}")
        if schedule not in SCHEDULES:
            raise TransformError(f"unknown schedule {schedule!r}: choose one of "
                                 f"{', '.join(SCHEDULES)}")
        self.an = an
        self.prog, self.st = an.prog, an.structure
        self.sh = an.sharding.for_tp(tp)  # patterns tp does not divide stay whole
        self.dp, self.tp, self.pp, self.k, self.schedule = dp, tp, pp, k, schedule
        self.written = 1 if one_replica else dp
        """The replicas the program writes: all ``dp``, or replica 0 alone (``dtp_replica``,
        whose gradient sums are ``ReplicaAllreduce``s over every replica's devices)."""
        self.nb = dp * k
        self._check_batch()
        self._check_layers()
        self._check_tensor()
        self.written_tp = 1 if one_rank and tp > 1 and self._ranks_alike() else tp
        """The tensor-parallel ranks the program writes: all ``tp``, or rank 0 alone
        (``dtp_replica`` where every rank runs alike: its collectives over the ranks are
        ``Peer*`` ops, rank 0's part of one over every rank's device)."""
        self._suffixes = tuple(f"_tp{t}" for t in range(self.written_tp)) if tp > 1 else ("",)
        st = self.st
        units = an.partition.stage_map(pp)
        self.stage: dict[int, int] = {i: int(units[p]) for i, p in st.pos.items()}
        self.unit_stage = units
        self._check_stages()
        self.training = bool(st.backward)
        self._canon: dict[Value, int] = {}
        self._keys: dict[tuple, int] = {}

    # -- checks ------------------------------------------------------------------------------
    def _check_batch(self) -> None:
        check_batch(self.an, self.dp, self.k)

    def _check_layers(self) -> None:
        check_layers(self.an, self.pp)

    def _check_tensor(self) -> None:
        """Every split axis divisible (weights, activations, the batch): depends only on
        the sharding (of this ``tp``) and ``nb``, so checked once per such pair."""
        done = _TENSOR_CHECKS.setdefault(self.sh, {})
        key = (self.tp, self.nb)
        if key not in done:
            try:
                self._check_tensor_once()
                done[key] = None
            except TransformError as e:
                done[key] = e
        err = done[key]
        if err is not None:
            raise TransformError(err.message, err.loc)

    def _check_tensor_once(self) -> None:
        prog, sh, tp, nb = self.prog, self.sh, self.tp, self.nb
        values = [p for p in prog.fn.params] + [v for i in prog.live_ops
                                                  for v in prog.ops[i].outputs]
        for v in values:
            lay = sh.layout.get(v)
            if lay is None or not any(lay.marks):
                continue
            shape = prog.shape(v)
            a = lay.axis(T)
            if a is not None and shape[a] % (tp * lay.groups):
                raise TransformError(self._tp_message(v, a, shape, lay.groups))
            a = next((i for i, m in enumerate(lay.marks) if is_batch(m)), None)
            if a is None:
                continue
            if shape[a] % nb:
                raise TransformError(f"the batch split over dp·microbatches = {nb} does not "
                                     f"divide dimension {a} (size {shape[a]}) of %{v.name} "
                                     f"(shape {shape})")
            m = lay.marks[a]
            if m is not None and m != B and (v in prog.returned or shape[a] % (batch_offset(m) * (
                    sh.batch_size or 1))):
                op = prog.producer_op(v)
                where = f"`{prog.op_text(op)}`" if op is not None else f"%{v.name}"
                raise TransformError(f"cannot split the batch over replicas and microbatches: "
                                     f"{where}: the batch lies inside axis {a} (shape "
                                     f"{shape}) of a result or does not fit in it")

    def _tp_message(self, v: Value, a: int, shape: tuple[int, ...], groups: int) -> str:
        tp = self.tp
        n = shape[a]
        if v in self.prog.param_set:
            fused = (f", which holds {groups} fused projections of {n // groups}"
                     if groups > 1 else "")
            return (f"tp={tp} does not divide dimension {a} (size {n}) of weight %{v.name} "
                    f"(shape {shape}){fused}: tensor parallelism splits it in {tp}")
        op = self.prog.producer_op(v)
        if op is not None and op.op_type == "Reshape" and len(shape) > len(
                self.prog.shape(op.inputs[0])):  # type: ignore[arg-type]
            return (f"tp={tp} does not divide the {n} attention heads (dimension {a} of "
                    f"%{v.name}, shape {shape}): tensor parallelism splits the heads")
        return (f"tp={tp} does not divide dimension {a} (size {n}) of %{v.name} "
                f"(shape {shape})")

    def _ranks_alike(self) -> bool:
        """Whether the ``tp`` ranks of a stage run the same ops on equal shapes, so that
        writing rank 0 alone simulates exactly as every rank (``distir.analysis.replicas``):
        every split is even (``_check_tensor``), and no op runs on rank 0 only, which a
        row-parallel ``Gemm``/``Conv`` with a bias (``emit``: the bias added once) and a
        returned per-microbatch value that is not split (returned, so kept to the end, by
        rank 0 alone) would. (A vocabulary-parallel op's constants of each rank, its first
        row and class ids, are kept apart from equal constants, ``ConstFn``: every rank
        holds as many.) Depends only on the sharding (of this ``tp``): found once per
        sharding."""
        hit = _RANKS_ALIKE.get(self.sh)
        if hit is None:
            hit = _RANKS_ALIKE[self.sh] = self._ranks_alike_once()
        return hit

    def _ranks_alike_once(self) -> bool:
        prog, sh = self.prog, self.sh
        for i in prog.live_ops:
            op = prog.ops[i]
            if op.op_type in ("Gemm", "Conv") and len(op.inputs) > 2 and any(
                    T in sh.partial.get(o, "") and o in prog.live_values for o in op.outputs):
                return False
        return not any(self.st.value_kind.get(v) == "m" and T not in sh.layout[v].marks
                       for v in prog.fn.returns)

    def ranks(self) -> range:
        """The tensor-parallel ranks the program writes (``written_tp``)."""
        return range(self.written_tp)

    def rank_suffixes(self) -> tuple[str, ...]:
        """The name suffix of each written rank's local value: ``_tp{t}`` (none with one
        rank)."""
        return self._suffixes

    def _check_stages(self) -> None:
        st, units = self.st, self.unit_stage
        for a_from, a_to, i in st.upward_pos:
            if units[a_from] < units[a_to]:
                raise TransformError(f"the backward value read by `{_text(self.prog, i)}` "
                                     "flows to a later pipeline stage: not supported")

    # -- devices and shapes ------------------------------------------------------------------
    @property
    def num_devices(self) -> int:
        return self.dp * self.tp * self.pp

    def device(self, d: int, s: int, t: int) -> int:
        return (d * self.pp + s) * self.tp + t

    def devices(self, d: int, s: int) -> list[int]:
        return [self.device(d, s, t) for t in range(self.tp)]

    def replica_group(self, s: int, t: int) -> tuple[int, ...]:
        """The devices of rank ``t`` of stage ``s`` on every replica."""
        return tuple(self.device(d, s, t) for d in range(self.dp))

    def local_shape(self, v: Value, per_replica: bool = False) -> tuple[int, ...]:
        """The shape of ``v`` on one device, per microbatch (or per replica)."""
        nb = self.dp if per_replica else self.nb
        return local_shape(self.prog.shape(v), self.sh.layout[v], nb, self.tp)

    def local_type(self, v: Value, device: int, per_replica: bool = False) -> TensorType:
        t = self.prog.type(v)
        return TensorType(t.dtype, self.local_shape(v, per_replica), device)

    def shape_operand(self, op: Op, k: int) -> np.ndarray:
        """The local value of a shape operand (``SHAPE_OPERANDS``): the local target shape
        of ``Reshape``/``Expand``, the local sizes of ``Split``."""
        if op.op_type == "Split":
            axis = self.prog.attrs(op).get("axis", 0)
            return np.array([self.local_shape(o)[axis] for o in op.outputs], dtype=np.int64)
        return np.array(self.local_shape(op.outputs[0]), dtype=np.int64)

    def shape_value(self, op: Op) -> np.ndarray:
        """The local value of a ``Shape`` (sliced by its ``start`` and ``end``) or ``Size``
        op: a constant of the distributed program."""
        arr = np.array(self.local_shape(op.inputs[0]), dtype=np.int64)  # type: ignore[arg-type]
        if op.op_type == "Size":
            return np.array(int(np.prod(arr)), dtype=np.int64)
        a = self.prog.attrs(op)
        return arr[slice(a.get("start", 0) or 0, a.get("end"))]

    def op_stage(self, i: int) -> int:
        return self.stage[i]

    def kind(self, i: int) -> int:
        return self.st.kind[i]

    # -- canonical keys of batch-independent values --------------------------------------------
    def const_key(self, attr: DenseAttr, per_rank: bool = False) -> int:
        """The key of a constant: its value; with ``per_rank``, ``attr`` stacks each rank's
        constant (``ConstFn``), whose keys are never those of a constant every rank
        holds, even of equal value on some rank."""
        return self._intern(("r" if per_rank else "c", attr))

    def canon(self, v: Value) -> int:
        """Equal keys for batch-independent values that are equal on every device (the
        causal masks and shape constants of all layers collapse to one). Values split
        differently are never equal: two zeros of one shape, one made whole and one made
        split over the ranks (an embedding gradient's, under vocabulary parallelism), keep
        their own keys."""
        c = self._canon.get(v)
        if c is not None:
            return c
        prog = self.prog
        i = prog.producer.get(v)
        if i is None:
            c = self._intern(("p", v))
        else:
            op = prog.ops[i]
            lay = self.sh.layout[v]
            if op.op_type in SHAPE_OPS:
                c = self.const_key(DenseAttr.from_array(self.shape_value(op)))
            elif op.op_type == "Constant" and set(op.attrs) <= {"value", "device"} and \
                    lay.is_replicated:
                c = self.const_key(op.attrs["value"])  # type: ignore[arg-type]
            else:
                ins = tuple(-1 if x is None else self.canon(x) for x in op.inputs)
                c = self._intern((op.op_type, op.attrs_key, ins, op.outputs.index(v), lay))
        self._canon[v] = c
        return c

    def _intern(self, key: tuple) -> int:
        c = self._keys.get(key)
        if c is None:
            c = self._keys[key] = len(self._keys)
        return c


def _text(prog: Program, i: int) -> str:
    return prog.op_text(prog.ops[i])

