"""The simulator: per-device clocks and memory, as an interpretation on the one interpreter.

``Simulator`` is a ``TypeInterpreter`` whose ``eval_op`` also times each op and tracks
memory, and whose ``eval_call`` memoizes a called function's whole typed cost.

Time (the execution semantics of spec/ops.md): each device has a clock. An op runs on the
devices that hold its inputs and results; it starts when all of them are free (their
values exist then too: every value was made by an op on its device) and occupies all of
them for its cost, so ops on disjoint devices overlap and a ``Send`` or a collective
synchronizes its devices.

Overlapped communication (distir's extension, ``ASYNC_OPS``: the all-reduces,
reduce-scatter and all-gather): each
device also has a communication clock (key ``comm_key(d)``). An asynchronous collective
starts when its devices' compute clocks have reached it (program order: what was issued
before it has run) and their communication clocks are free; it advances only the
communication clocks, and each device's compute clock by ``overlap_slowdown`` times its
cost (the compute it slows down while both run; hidden if the device has nothing else to
do). Its results are *pending* until the first op that reads one: that op's device first
waits for the collective's end. Pending values keep pending across
calls both ways (a pending argument is one more symbol of the callee's summary, the time
it is ready), so a called function times exactly as its inlined ops. Where the profile
sets ``overlap_comm_slowdown`` (a collective stretched by the bandwidth-bound compute
beside it), the step's end comes from a replay of the events with concrete clocks
(``distir.analysis.trace.replay``), in programs that run an asynchronous collective.

Calls: a function's clocks at its return are a max-plus linear function of the clocks at
its entry, ``out[d] = max_k(entry[k] + delay[d][k])``. The first call of a function with
given argument values simulates its body once with symbolic clocks (each device's clock
is a vector of delays from the entry clocks of the devices touched, plus a shift); every
later call applies the summary in O(devices touched), so a 128-microbatch pipeline that
calls one stage function 128 times simulates its body once. Calls equal up to renaming
devices (replicas, equal stages elsewhere) share one summary, renamed per call
(``distir.analysis.renaming``). Results are exactly those of the inlined program (tests
check both).

Memory: see ``distir.analysis.memory``. Units: seconds, bytes, FLOPs.
"""

from __future__ import annotations

import warnings
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter, itemgetter
from typing import Any

from distir._util import no_gc
from distir.analysis.cost import COST_RULES, OpCost, fallback_cost, load_cost_rules, main_dtype
from distir.analysis.cost.compute import REDUCED_AXES, copied_transpose
from distir.analysis.hardware import Hardware, load_hardware
from distir.analysis.interpreter import TypeInterpreter
from distir.analysis.layout import (
    ALWAYS_LOOKED_AT,
    CONCAT_OPS,
    COPIED_INPUTS,
    INPUT_STRIDES,
    LAYOUT_OPS,
    ORDERED_OPS,
    REDUCE_OPS,
    RESTRIDING,
    Layouts,
    reshape_target,
)
from distir.analysis.memory import (
    ALIASED,
    BY_STRIDES,
    STAGED_REDUCE,
    FunctionLiveness,
    Memo,
    OpLiveness,
    guess_copies,
    liveness,
    placed_bytes,
    staged_bytes,
    transient_bytes,
)
from distir.analysis.renaming import (
    ARG_KEY0,
    HOST_KEY0,
    canonical_devices,
    device_free,
    rename_summary,
    rename_value,
)
from distir.analysis.replicas import ReplicaProgram, replica_program
from distir.analysis.values import concrete, type_of
from distir.errors import SimulationError
from distir.ir.core import Function, Module, Op, Value
from distir.ir.schemas import ASYNC_OPS
from distir.ir.types import TensorType, Type

__all__ = ["Simulator", "Simulation", "simulate", "CostFallbackWarning"]

ROOT = -1
"""The clock symbol of the entry function: every device starts at time 0."""


def comm_key(d: int) -> int:
    """The clock key (and entry symbol) of device ``d``'s communication stream."""
    return -2 - d


_HOST0 = HOST_KEY0


def host_key(d: int) -> int:
    """The clock key (and entry symbol) of device ``d``'s host, where the profile models
    host dispatch (``Hardware.host_dispatch``)."""
    return _HOST0 - d


_ARG0 = ARG_KEY0


def arg_key(i: int) -> int:
    """In a callee, the symbol of the time its pending argument ``i`` is ready."""
    return _ARG0 - i


_NEG = float("-inf")

KEEP_RECORDS = 200_000
"""A shared simulator clears its op records (and costs, renamed values, byte counts) after
a program once it holds more than this many: a 1,024-GPU program makes ~100,000 of its
own, which no other configuration reuses."""

KEEP_INPUTS = 20_000
"""A shared simulator keeps, after the program that first calls it, a function whose ops
take at most this many inputs in all (stage and layer functions); a larger one is
summarized again by each program that calls it (see ``Simulator._forget_large``)."""
_ROOT_VEC: dict[int, float] = {ROOT: 0.0}


class CostFallbackWarning(UserWarning):
    """Some ops had no cost rule and were costed by ``cost.fallback_cost``."""


class _TopBases(dict):
    """Clock vectors of the entry function: every device starts at the root symbol."""

    def initial(self, d: int) -> dict[int, float]:
        return _ROOT_VEC

    def __missing__(self, d: int) -> dict[int, float]:
        self[d] = _ROOT_VEC
        return _ROOT_VEC


class _EntryBases(dict):
    """Clock vectors of a callee: each device (or communication stream) starts at an entry
    symbol: its own, or, where the call found clocks equal (``sym``: key -> the first key
    of its class, see ``Simulator._classes``), one symbol for the class."""

    def __init__(self, sym: dict[int, int] | None = None) -> None:
        super().__init__()
        self.sym = sym or {}
        self._start: dict[int, dict[int, float]] = {}

    def initial(self, d: int) -> dict[int, float]:
        s = self.sym.get(d, d)
        v = self._start.get(s)
        if v is None:
            v = self._start[s] = {s: 0.0}
        return v

    def __missing__(self, d: int) -> dict[int, float]:
        v = self[d] = self.initial(d)
        return v


def entry_keys(args: Sequence[Any], host: bool = False) -> tuple[int, ...]:
    """The clock keys a call on ``args`` starts from: each device of the arguments in
    order of first appearance, then its communication stream (and its host, with
    ``host``)."""
    seen: dict[int, None] = {}
    # Each distinct argument once, in order of first appearance (arguments are interned:
    # equal ones are one object), by C-level passes.
    for a in dict(zip(map(id, args), args)).values():
        if a is not None:
            for d in type_of(a).devices:
                seen[d] = None
    out: list[int] = []
    if host:
        for d in seen:
            out += (d, comm_key(d), _HOST0 - d)
    else:
        for d in seen:
            out += (d, comm_key(d))
    return tuple(out)


class CallSummary:
    """The typed cost of one call: results, clock delays (``vecs[d][k]``: the delay from
    device ``k``'s entry clock to device ``d``'s exit clock, for every device touched),
    compute and communication time per device, peak and net memory relative to the entry,
    the events (for traces) and the number of ops."""

    __slots__ = ("fn", "outs", "vecs", "compute", "comm", "peak", "net", "events", "n_ops",
                 "pending", "rename", "host", "has_async", "held")

    def __init__(self, fn: Function, outs: tuple, vecs: dict[int, dict[int, float]],
                 compute: dict[int, float], comm: dict[int, float], peak: dict[int, int],
                 net: dict[int, int], events: list, n_ops: int,
                 pending: tuple[tuple[int, int, dict[int, float]], ...] = (),
                 rename: dict[int, int] | None = None,
                 host: dict[int, float] | None = None, has_async: bool = False,
                 held: tuple[tuple[int, tuple[tuple[int, int], ...]], ...] = ()) -> None:
        self.fn = fn
        self.outs = outs
        self.vecs = vecs
        self.compute = compute
        self.comm = comm
        self.peak = peak
        self.net = net
        self.events = events
        self.n_ops = n_ops
        self.pending = pending
        """``(result index, device, ready clock vector)`` of the results still pending
        (made by an asynchronous collective and not read inside the callee)."""
        self.rename = rename
        """``None``, or for a summary renamed from another call's (``distir.analysis.
        renaming``): the devices of ``events`` (canonical) -> this call's devices."""
        self.host = host or {}
        """Seconds each device's host spends issuing the call's ops (where the profile
        models host dispatch)."""
        self.has_async = has_async
        """Whether the call runs an asynchronous collective (``ASYNC_OPS``), itself or in
        its calls."""
        self.held = held
        """``(result index, ((device, bytes), ...))`` of the results that are views of a
        storage the callee made (``memory.FunctionLiveness.return_storage``): the bytes
        its caller frees with them."""


# A record of one op evaluated on given argument values, memoized by ((op type, attributes,
# result count), argument values); a plain tuple, read on the hot path:
#   0 results, 1 the device if the op and its results are on one device else -1,
#   2 seconds, 3 bytes its results take on that device, 4 devices, 5 ((device, bytes), ...)
#   of the results, 6 ((device, bytes), ...) per input, 7 detail: (OpCost, input types,
#   result types, ((device, bytes), ...) per result), 8 for an asynchronous collective the
#   device of each result, else None, 9 the seconds each of its devices' host spends
#   issuing it (0 where the profile does not model the host), 10 whether it is bandwidth-
#   bound compute on one device (only where the profile sets ``overlap_comm_slowdown``),
#   11 the bytes of a temporary its kernel holds while it runs (``memory.transient_bytes``),
#   12 the strides its first result is written in where they are not contiguous (a
#   convolution run channels-last: ``Layouts.mark`` on every evaluation), else None.
#   A view computed as its input's storage (``memory.ALIASED``) has no bytes in 3, 5, 7.
_Rec = tuple


class Simulator(TypeInterpreter):
    """Simulates functions on one hardware profile. Op records, costs and call summaries
    are cached on the simulator and reused across ``simulate`` calls."""

    def __init__(self, hardware: Hardware | str = "h100-sxm", *, fallback: bool = False,
                 check_annotations: bool = True, share_equal_functions: bool = False,
                 rename_devices: bool = True) -> None:
        """``share_equal_functions``: calls of structurally equal functions (``==``: the
        same program up to value names) share one summary, across all the programs this
        simulator runs (the configurations of a search emit equal stage and layer
        functions as new objects). Times, memory and the trace's timing are unchanged; a
        trace then names the values of the first of the equal functions simulated.

        ``rename_devices``: calls equal up to renaming devices (replicas, stages of equal
        shape, across programs too) share one summary, renamed per call
        (``distir.analysis.renaming``: exact, a test compares with the inlined program);
        off, each device assignment is summarized apart."""
        super().__init__(check_annotations=check_annotations)
        load_cost_rules()
        self.hw = load_hardware(hardware)
        self._host = self.hw.models_host
        self.fallback = fallback
        self.uncosted: dict[str, None] = {}
        self._recs: dict[tuple, _Rec] = {}
        self._rec_by_id: dict[int, _Rec] = {}  # the records (kept alive by _recs) by id
        self._costs: dict[tuple, OpCost] = {}
        self._summaries: dict[tuple, CallSummary] = {}
        self._callees: dict[int, Function] = {}
        self._live_memo = Memo()
        self._canon: dict[Any, Any] = {}  # types and values interned: equal is identical
        self._lv: dict[Op, OpLiveness] = {}  # liveness of the ops of the function running
        self._drop: frozenset[int] = frozenset()  # results its caller drops
        self._no_owned: dict[int, bytes] = {}
        # Equal functions: the representative of each structure (compared with ``==`` once
        # per function object), and per function object of the program running, its
        # representative by id (the program keeps those objects alive while it runs).
        self._reps: dict[Function, Function] | None = {} if share_equal_functions else None
        self._rep_of: dict[int, Function] = {}
        if self._reps is not None:  # liveness of equal callees: the representative's
            self._live_memo.resolve = self._rep
        self._rename = rename_devices
        self._device_free: dict[int, bool] = {}
        self._renamed: dict[tuple[int, int], Any] = {}  # (id(value), device) -> renamed
        self._placed: dict[int, tuple[Any, tuple]] = {}  # id(value) -> (value, placed bytes)
        self._entry_keys: dict[tuple[int, ...], tuple[int, ...]] = {}  # by argument ids
        self._layout_tracker = Layouts(lambda: self.env)
        self._layouts: Layouts | None = None  # the tracker, in a program with LAYOUT_OPS
        self._entry: Function | None = None  # the program's entry function
        # the function running's frees of storages read through broadcast views
        self._root_frees: dict[Op, tuple[tuple[int, Value, int], ...]] | None = None
        # its liveness, and its views or copies by types and strides to check
        # (``memory.MAYBE_VIEWS``); per (function, dropped results), those its last run
        # found its liveness's guesses wrong about; per (type, attributes), whether a
        # ``Transpose`` copies
        self._fl: FunctionLiveness | None = None
        self._ret_held: tuple = ()  # (``_loop``: the last run's ``CallSummary.held``)
        self._fn_now: Function | None = None
        self._maybe: dict[Op, bool] | None = None
        self._flips: dict[tuple[int, frozenset[int]], frozenset[Op]] = {}
        self._copied_t: dict[tuple, bool] = {}
        self.entry_flips: frozenset[Op] = frozenset()
        """The views or copies by types and strides (``memory.MAYBE_VIEWS``) that the last
        program's entry function took against its liveness's guesses (``liveness``'s
        ``flips``): its liveness as simulated is ``liveness(fn, entry=True, views=True,
        flips=entry_flips)``."""
        self._new_reps: list[Function] = []  # representatives new in this program
        self._renamed_keys: list[tuple] = []  # summaries renamed in this program
        self._new_state(top=True, owned=())

    def _rep(self, fn: Function) -> Function:
        """The representative of the functions equal to ``fn`` (with sharing)."""
        rep = self._rep_of.get(id(fn))
        if rep is None:
            assert self._reps is not None
            rep = self._rep_of[id(fn)] = self._reps.setdefault(fn, fn)
            if rep is fn:
                self._new_reps.append(fn)
        return rep

    def _forget_large(self) -> None:
        """Drop the representatives first seen in the program just simulated whose ops
        take more than ``KEEP_INPUTS`` inputs, with their summaries: a data-parallel
        replica's whole schedule (``dtp``'s ``@replica``) is shared by the replicas of
        one program but rarely recurs in another, and keeping one per configuration
        would make a search's memory grow with its configurations."""
        assert self._reps is not None
        drop = {id(f): f for f in self._new_reps
                if sum(map(len, (op.inputs for op in f.ops))) > KEEP_INPUTS}
        self._new_reps.clear()
        if not drop:
            return
        for f in drop.values():
            del self._reps[f]
            self._callees.pop(id(f), None)
            self._device_free.pop(id(f), None)
        for k in [k for k in self._summaries if k[0] in drop]:
            del self._summaries[k]

    def _bytes(self, v: Any) -> tuple:
        """``placed_bytes`` of an abstract value, cached by identity (values are interned)."""
        hit = self._placed.get(id(v))
        if hit is None:
            hit = self._placed[id(v)] = (v, placed_bytes(type_of(v)))
        return hit[1]

    # -- state -----------------------------------------------------------------------
    def _new_state(self, top: bool, owned: Sequence[bool] | bytes,
                   sym: dict[int, int] | None = None,
                   extra: dict[int, tuple] | None = None) -> None:
        """Fresh clocks, memory and events, for the entry function (``top``: one clock
        symbol for all devices) or a callee (one symbol per device, or per class of
        devices whose clocks are equal at the call: ``sym``)."""
        self._base: _TopBases | _EntryBases = _TopBases() if top else _EntryBases(sym)
        self._shift: defaultdict[int, float] = defaultdict(float)
        self._mem: defaultdict[int, int] = defaultdict(int)
        self._peak: defaultdict[int, int] = defaultdict(int)
        self._events: list = []
        self._calls: list[CallSummary] = []
        self._owned = owned
        # Per parameter handed over as a part of a storage, the rest of its storage's bytes,
        # freed with it (``memory.OpLiveness``'s give)
        self._extra = extra
        # Per call result that is a view of a storage its callee made, that storage's
        # bytes, freed with it (``CallSummary.held``)
        self._held: dict[Value, tuple] = {}
        # Results of asynchronous collectives not read yet: value -> (device, ready vector).
        self._pending: dict[Value, tuple[int, dict[int, float]]] = {}
        self._async = False  # whether an asynchronous collective ran (here or in a call)

    def _save(self) -> tuple:
        return (self._base, self._shift, self._mem, self._peak, self._events, self._calls,
                self._owned, self._lv, self._drop, self._pending, self._async,
                self._root_frees, self._fl, self._fn_now, self._maybe, self._extra,
                self._held)

    def _restore(self, s: tuple) -> None:
        (self._base, self._shift, self._mem, self._peak, self._events, self._calls,
         self._owned, self._lv, self._drop, self._pending, self._async,
         self._root_frees, self._fl, self._fn_now, self._maybe, self._extra,
         self._held) = s

    def _wait(self, inputs: Sequence[Value | None]) -> None:
        """The pending inputs of an op: each one's device waits for its collective."""
        pending = self._pending
        base = self._base
        shift = self._shift
        for v in inputs:
            p = pending.pop(v, None)  # type: ignore[arg-type]
            if p is None:
                continue
            d, ready = p
            sh = shift[d]
            m = dict(ready)
            for k, x in base[d].items():
                x += sh
                if x > m.get(k, _NEG):
                    m[k] = x
            base[d] = m
            shift[d] = 0.0

    def _busy(self) -> tuple[dict[int, float], dict[int, float], dict[int, float], int]:
        """Compute, communication and host seconds per device and the op count of the
        current state's events: each distinct record's cost times its count, plus the
        calls'."""
        comp: defaultdict[int, float] = defaultdict(float)
        comm: defaultdict[int, float] = defaultdict(float)
        host: defaultdict[int, float] = defaultdict(float)
        counts = Counter(map(id, map(itemgetter(1), self._events)))
        n = len(self._events) - len(self._calls)
        by_id = self._rec_by_id
        for rid, c in counts.items():
            rec = by_id.get(rid)
            if rec is not None:  # else a call's event
                busy = comm if rec[7][0].comm else comp
                t = rec[2] * c
                for d in rec[4]:
                    busy[d] += t
                if rec[9]:
                    h = rec[9] * c
                    for d in rec[4]:
                        host[d] += h
        for s in self._calls:
            for d, t in s.compute.items():
                comp[d] += t
            for d, t in s.comm.items():
                comm[d] += t
            for d, t in s.host.items():
                host[d] += t
            n += s.n_ops
        return dict(comp), dict(comm), dict(host), n

    @staticmethod
    def _has_layout_ops(fn: Function) -> bool:
        """Whether ``fn`` or a function it calls has an op whose cost depends on strides
        that some value may have (then the simulation tracks strides,
        ``distir.analysis.layout``): a convolution or an indexing op, or a layout op
        (``layout.WHEN_STRIDED``) in a program with an op that gives a view other strides
        (``layout.RESTRIDING``): else every value is contiguous."""
        op_type = attrgetter("op_type")
        fns = (fn, *fn.reachable())
        types = [frozenset(map(op_type, f.ops)) for f in fns]  # (at C speed)
        if any(not t.isdisjoint(ALWAYS_LOOKED_AT) for t in types):
            return True
        return any(not t.isdisjoint(RESTRIDING) for t in types) and \
            any(not t.isdisjoint(LAYOUT_OPS) for t in types)

    def _prepare(self, fn: Function) -> FunctionLiveness:
        """Liveness of ``fn`` as its caller uses it (``self._drop``), computed once; the
        entry function's parameters are contiguous. Its views and copies of types and
        strides (``memory.MAYBE_VIEWS``) as the last run of ``fn`` found them."""
        flips = self._flips.get((id(fn), self._drop), frozenset())
        return liveness(fn, self._live_memo, self._drop, fn is self._entry, views=True,
                        flips=flips)

    def _flip(self, op: Op) -> FunctionLiveness:
        """The function running's liveness with ``op``'s guess (view or copy,
        ``memory.MAYBE_VIEWS``) flipped, and those of its peers after it guessed the same
        (``FunctionLiveness.peers``): the facts of the ops before it are the same. Kept as
        the guesses of the function's next run."""
        fn = self._fn_now
        fl = self._fl
        assert fn is not None and fl is not None and fl.maybe is not None
        # (with it, the ops alike after it that are guessed the same: a layer's in the
        # layers after it, flipped back one by one where they differ)
        was = fl.maybe[op]
        flips = fl.flips.symmetric_difference(
            [op] if fl.peers is None or op not in fl.peers else
            [o for o in fl.peers[op][0][fl.peers[op][1]:] if fl.maybe.get(o) is was])
        fl = liveness(fn, self._live_memo, self._drop, fn is self._entry, views=True,
                      flips=flips, after=op)  # (the ops before it have run)
        self._flips[(id(fn), self._drop)] = flips
        self._fl = fl
        self._lv = fl.ops
        self._root_frees = fl.root_frees
        self._maybe = fl.maybe
        return fl

    def _copies(self, op: Op, args: tuple, fmt: Any) -> bool:
        """Whether the backend computes ``op`` (one of ``memory.MAYBE_VIEWS``) as a copy:
        a ``Transpose`` by its input's type (``cost.compute.copied_transpose``), a reshape
        by its input's strides (``fmt``, its layout: ``layout.COPIED_INPUTS``)."""
        if op.op_type == "Slice":  # (steps passed in: a copy where not all positive)
            steps = concrete(args[4]) if len(args) > 4 and args[4] is not None else None
            return steps is not None and not bool((steps > 0).all())
        if op.op_type != "Transpose":
            return fmt is not None and any(k == COPIED_INPUTS for k, _ in fmt)
        t = type_of(args[0]) if args and args[0] is not None else None
        if not isinstance(t, TensorType):
            return guess_copies(op)
        key = (t, op.attrs_key)
        hit = self._copied_t.get(key)
        if hit is None:
            perm = op.attrs.get("perm")
            hit = self._copied_t[key] = copied_transpose(
                tuple(t.shape), t.dtype.itemsize,
                perm if isinstance(perm, tuple | list) else None)
        return hit

    # -- the interpreter's hooks -----------------------------------------------------
    def run(self, fn: Function, args: Sequence[Any]) -> tuple:
        fl = self._prepare(fn)
        self._fl = fl
        self._fn_now = fn
        self._lv = fl.ops
        self._root_frees = fl.root_frees
        self._maybe = fl.maybe
        # The type interpreter's per-op check, only where there is something to check.
        self.post_op = self._post if fl.annotated and self.check_annotations else None
        # This run's op hook: a closure over the current state (the loop binds it once).
        self.eval_op = self._op_evaluator()  # type: ignore[method-assign,assignment]
        layouts = self._layouts
        if layouts is None:
            return super().run(fn, args)
        layouts.enter(fn)
        try:
            return super().run(fn, args)
        finally:
            layouts.leave()

    def _loop(self, fn: Function, env: dict[Value | None, Any]) -> None:
        super()._loop(fn, env)
        if self._layouts is not None:
            self._layouts.returned(fn)
        fl = self._fl
        # The storages of the results that are views of one made here, for the caller
        # (``CallSummary.held``), as the run's flips left them.
        self._ret_held = () if fl is None or not fl.return_storage else tuple(
            (i, self._storage_bytes(root, env)) for i, root in fl.return_storage)

    def _storage_bytes(self, root: Value, env: dict) -> tuple:
        """The bytes of the storage ``root`` per device: a call's result that is a view of
        one its callee made holds that storage's (``CallSummary.held``)."""
        b = self._held.get(root)
        return b if b is not None else self._bytes(env[root])

    def eval_op(self, op: Op, args: tuple) -> tuple:
        """Time one op and account for its memory (see ``_op_evaluator``)."""
        return self._op_evaluator()(op, args)

    def _op_evaluator(self) -> Callable[[Op, tuple], tuple]:
        """The per-op hook of the function about to run, bound to the current clocks,
        memory and events: look up (or make) the op's record, advance the clock of its
        device (or synchronize its devices), allocate its results, free what dies."""
        lvs = self._lv
        recs = self._recs
        record = self._record
        events_append = self._events.append
        shift = self._shift
        mem = self._mem
        peak = self._peak
        owned = self._owned
        extra = self._extra
        sync = self._sync
        pending = self._pending
        none_pending = pending.keys().isdisjoint  # (a live view of the pending values)
        wait = self._wait
        gate = self._gate if self._host else None
        by_layout = self._input_layout
        root_frees = self._root_frees
        free_roots = self._free_roots
        layouts = self._layouts
        mark = layouts.mark if layouts is not None else None
        frame_key = layouts.frame_key if layouts is not None else tuple
        contiguous = layouts.contiguous if layouts is not None else None

        def by_strides(op: Op, args: tuple) -> tuple[tuple[str, Any], ...] | None:
            if contiguous is None or contiguous(op.inputs):
                return None  # (the common case: nothing strided reaches the op)
            return by_layout(op, args)

        maybe = self._maybe
        copies = self._copies

        def eval_op(op: Op, args: tuple) -> tuple:
            nonlocal lvs, root_frees, maybe
            if pending and not none_pending(op.inputs):
                wait(op.inputs)
            lv = lvs[op]
            sig = lv[0]
            fmt: Any = False
            if maybe is not None and op in maybe:  # a view or a copy by types and strides
                fmt = by_strides(op, args) if sig[-1] is BY_STRIDES else None
                if copies(op, args, fmt) is not maybe[op]:  # the guess was wrong: flip it
                    fl = self._flip(op)
                    lvs, root_frees, maybe = fl.ops, fl.root_frees, fl.maybe
                    lv = lvs[op]
                    sig = lv[0]
            last = sig[-1]
            key: tuple
            if last is BY_STRIDES:
                key = (sig, args, by_strides(op, args) if fmt is False else fmt)
            elif last is op:  # (a record of its own, by its function's argument strides)
                key = (sig, args, frame_key())
            else:
                key = (sig, args)
            rec = recs.get(key)
            if rec is None:
                rec = recs[key] = record(op, args)
            elif rec[12] is not None and mark is not None:  # (made in another run)
                mark(op, rec[12])
            events_append((op, rec))
            d = rec[1]
            if d >= 0:  # the common case: one device, results on it
                if gate is not None:
                    gate(d, rec[9])
                shift[d] += rec[2]
                b = rec[3]
                if b:
                    x = mem[d] + b
                    mem[d] = x
                    if x > peak[d]:
                        peak[d] = x
                if rec[11]:  # a temporary the kernel holds while it runs
                    x = mem[d] + rec[11]
                    if x > peak[d]:
                        peak[d] = x
            else:
                sync(rec, op)
            _, free_in, free_param, free_out, _, _ = lv
            if free_in:
                in_mem = rec[6]
                for i in free_in:
                    for d, b in in_mem[i]:
                        mem[d] -= b
            if free_param:
                for i, j in free_param:
                    if owned[j]:
                        for d, b in rec[6][i]:
                            mem[d] -= b
                        if extra is not None and j in extra:
                            for d, b in extra[j]:
                                mem[d] -= b
            if free_out:
                per_out = rec[7][3]
                for i in free_out:
                    for d, b in per_out[i]:
                        mem[d] -= b
            if root_frees is not None:
                rf = root_frees.get(op)
                if rf is not None:
                    free_roots(rf)
            return rec[0]

        return eval_op

    def _free_roots(self, frees: tuple[tuple[int, Value, int], ...]) -> None:
        """Free the storages read last through a view of other bytes (a broadcast, a part)
        (``FunctionLiveness.root_frees``), by their own bytes; a parameter only where the
        caller handed it over."""
        env = self.env
        assert env is not None
        mem = self._mem
        extra = self._extra
        for _, root, pi in frees:
            if pi < 0 or self._owned[pi]:
                for d, b in self._storage_bytes(root, env):
                    mem[d] -= b
                if pi >= 0 and extra is not None and pi in extra:
                    for d, b in extra[pi]:
                        mem[d] -= b

    def _gate(self, d: int, h: float) -> None:
        """Device ``d``'s host issues an op (``h`` seconds), which cannot start on the
        device before: the device's clock becomes the larger of its own and its host's."""
        base = self._base
        shift = self._shift
        hk = _HOST0 - d
        sh = shift[hk] + h
        shift[hk] = sh
        bh = base[hk]
        bd = base[d]
        sd = shift[d]
        if bh is bd:
            if sh > sd:
                shift[d] = sh
            return
        up: dict[int, float] | None = None
        for k, x in bh.items():
            x += sh
            y = bd.get(k)
            if y is None or x > y + sd:
                if up is None:
                    up = {}
                up[k] = x
        if up is None:  # the device is behind its host: nothing changes
            return
        if len(up) == len(bh) and all(k in bh for k in bd):
            # The host is later in every term: the device waits for it exactly (sharing
            # the host's vector keeps the next ops on the cheap path above).
            base[d] = bh
            shift[d] = sh
            return
        m = {k: v + sd for k, v in bd.items()}
        m.update(up)
        base[d] = m
        shift[d] = 0.0

    def _sync(self, rec: _Rec, op: Op) -> None:
        """An op on several devices: it starts when all are free and ends on all together.
        An asynchronous collective runs on their communication clocks instead (it starts
        once their compute clocks have reached it) and leaves its results pending."""
        base = self._base
        shift = self._shift
        devs = rec[4]
        async_devs = rec[8]
        keys = devs if async_devs is None else (*devs, *map(comm_key, devs))
        h = rec[9]
        if self._host:  # each device's host issues it, then it may start
            hosts = tuple(_HOST0 - d for d in devs)
            for k in hosts:
                shift[k] += h
            keys = (*keys, *hosts)
        m: dict[int, float] = {}
        for d in keys:
            sh = shift[d]
            for k, v in base[d].items():
                v += sh
                if v > m.get(k, _NEG):
                    m[k] = v
        cost = rec[2]
        if async_devs is None:
            for d in devs:
                base[d] = m
                shift[d] = cost
        else:
            for d in devs:
                c = comm_key(d)
                base[c] = m
                shift[c] = cost
            self._async = True
            slow = self.hw.overlap_slowdown * cost
            if slow:  # what the collective takes from the compute beside it
                for d in devs:
                    shift[d] += slow
            ready = {k: x + cost for k, x in m.items()}
            pending = self._pending
            for o, d in zip(op.outputs, async_devs):
                pending[o] = (d, ready)
        mem = self._mem
        peak = self._peak
        for d, b in rec[5]:
            x = mem[d] + b
            mem[d] = x
            if x > peak[d]:
                peak[d] = x

    def eval_call(self, op: Op, callee: Function, args: tuple) -> tuple:
        _, free_in, free_param, free_out, give, drop = self._lv[op]
        rf = self._root_frees.get(op) if self._root_frees is not None else None
        # Which arguments the callee owns, as bytes (part of the summary's key): the
        # values of this function handed over (``give``'s mask, made once per op) and
        # those of its parameters handed over that it owns itself.
        given: bytes | None = None
        ex: tuple = ()  # (position, bytes) of the rest of a part's storage handed over
        if give:
            given, params, parts = give
            if params:
                owned = self._owned
                extra = self._extra
                mask = bytearray(given) if given is not None else bytearray(len(args))
                for pos, pi in params:
                    if owned[pi]:
                        mask[pos] = 1
                        if extra is not None and pi in extra:
                            ex = (*ex, (pos, extra[pi]))
                given = bytes(mask)
            if parts:
                env = self.env
                assert env is not None
                for pos, r in parts:
                    ex = (*ex, (pos, self._rest(self._storage_bytes(r, env), args[pos])))
        if given is None:
            given = self._no_owned.get(len(args))
            if given is None:
                given = self._no_owned[len(args)] = bytes(len(args))
        # Arguments are interned (``_canon``), so their identities stand for their values:
        # hashing ids is far cheaper than hashing hundreds of types.
        # Pending arguments stay pending inside (each is a symbol there, see _summarize).
        pending = self._pending
        waiting = tuple(i for i, v in enumerate(op.inputs) if v in pending) \
            if pending and not pending.keys().isdisjoint(op.inputs) else ()
        if self._reps is not None:
            rep = self._rep_of.get(id(callee))
            callee = rep if rep is not None else self._rep(callee)
        # The callee by identity too (functions compare by structure); ``_callees`` keeps
        # each summarized one alive so that its id is not reused.
        ids = tuple(map(id, args))
        cls = self._classes(args, ids)
        layouts = self._layouts
        # (the arguments' strides, where some are strided views: the callee's ops are priced
        # by them, ``distir.analysis.layout``)
        strided = layouts.before_call(op) if layouts is not None else ()
        key = (id(callee), ids, given, drop, waiting, cls, strided, ex)
        s = self._summaries.get(key)
        if s is None:
            self._callees[id(callee)] = callee
            s = self._summaries[key] = self._summary(callee, args, given, drop, waiting, cls,
                                                     strided, ex)
            if s.rename is not None:
                self._renamed_keys.append(key)
        if layouts is not None:
            layouts.after_call(op, callee, strided)
        self._apply(s, op, waiting)
        if s.held:
            outs = op.outputs
            for i, b in s.held:
                self._held[outs[i]] = b
        mem = self._mem
        nbytes = self._bytes
        for i in free_in:
            for d, b in nbytes(args[i]):
                mem[d] -= b
        for i, j in free_param:
            if self._owned[j]:
                for d, b in nbytes(args[i]):
                    mem[d] -= b
                if self._extra is not None and j in self._extra:
                    for d, b in self._extra[j]:
                        mem[d] -= b
        for i in free_out:
            for d, b in nbytes(s.outs[i]):
                mem[d] -= b
        if rf:
            self._free_roots(rf)
        return s.outs

    # -- records, costs, calls ---------------------------------------------------------
    def _input_layout(self, op: Op, args: tuple) -> tuple[tuple[str, Any], ...] | None:
        """``layout.Layouts.op_layout``'s attributes for a reshape, a reduction, a
        concatenation or an elementwise op whose inputs may be strided
        (``layout.WHEN_STRIDED``): a reduction's input strides, a concatenation's count of
        strided parts, an elementwise op's operands read across their rows, the copy a
        ``Reshape`` or ``Flatten`` of a strided input makes; else ``None``. A reshape's from its
        arguments alone: the target shape is the ``Reshape``'s concrete shape input (``0``
        and ``-1`` as ONNX reads them) or ``Flatten``'s ``axis``."""
        layouts = self._layouts
        if layouts is None:
            return None
        if op.op_type in REDUCE_OPS:
            return layouts.input_strides(op)
        if op.op_type in CONCAT_OPS:
            return layouts.op_layout(op)
        if op.op_type in ORDERED_OPS:
            return layouts.elementwise_layout(op)
        x = getattr(type_of(args[0]), "shape", None) if args and args[0] is not None else None
        if x is None:
            return None
        shape = tuple(x)
        target = reshape_target(op, shape, args)
        return None if target is None else layouts.reshape_layout(op, shape, target)

    def _record(self, op: Op, args: tuple) -> _Rec:
        canon = self._canon
        outs = tuple(canon.setdefault(o, o) for o in self._infer(op, args))
        in_types = tuple(None if a is None else type_of(a) for a in args)
        out_types = tuple(type_of(o) for o in outs)
        seen: dict[int, None] = {}
        for t in (*in_types, *out_types):
            if t is not None:
                for d in t.devices:
                    seen[d] = None
        devs = tuple(seen)
        lv = self._lv[op]
        free_out = lv[3]
        fmt = None
        written = None
        # (an op whose cost depends on strides ends its signature: ``memory.liveness``)
        if self._layouts is not None and lv[0][-1] is op:
            fmt = self._layouts.op_layout(
                op, tuple(getattr(out_types[0], "shape", ())) if out_types else ())
            written = self._layouts.written(op)
        elif lv[0][-1] is BY_STRIDES:
            fmt = self._input_layout(op, args)
        staged = 0
        if op.op_type in STAGED_REDUCE and self.hw.sm_count:
            staged = self._staging(op, args, in_types, fmt)
        if op.op_type in REDUCE_OPS and len(args) > 1 and args[1] is not None:
            axes = concrete(args[1])  # (which axes: the cost rule sees types alone)
            if axes is not None:
                fmt = (*(fmt or ()), (REDUCED_AXES, tuple(int(a) for a in axes.reshape(-1))))
        if free_out and op.op_type in COST_RULES.skips_unused:
            cost = self._cost(op, in_types, tuple(None if i in free_out else t
                                                  for i, t in enumerate(out_types)), fmt)
        else:
            cost = self._cost(op, in_types, out_types, fmt)
        per_out = tuple(placed_bytes(t) for t in out_types) if lv[0][3:4] != (ALIASED,) \
            else ((),) * len(out_types)  # (a view: its input's storage)
        flat = tuple(x for p in per_out for x in p)
        in_mem = tuple(() if t is None else placed_bytes(t) for t in in_types)
        one = devs[0] if len(devs) == 1 and all(d == devs[0] for d, _ in flat) else -1
        async_devs = None
        if op.op_type in ASYNC_OPS:
            one = -1
            async_devs = tuple(t.devices[0] for t in out_types)
        # Whether it is bandwidth-bound compute on one device, where the profile stretches
        # a collective beside such compute (``trace.replay``).
        bw = bool(self.hw.overlap_comm_slowdown) and one >= 0 and not cost.comm \
            and self.hw.bandwidth_bound(cost.flops, cost.bytes, main_dtype(in_types, out_types))
        rec = (outs, one, cost.seconds, sum(b for _, b in flat), devs, flat, in_mem,
               (cost, in_types, out_types, per_out), async_devs,
               self.hw.host_seconds(op.op_type) if self._host else 0.0, bw,
               transient_bytes(op.op_type, in_types) + staged if one >= 0 else 0, written)
        self._rec_by_id[id(rec)] = rec
        return rec

    def _staging(self, op: Op, args: tuple, in_types: tuple, fmt: Any) -> int:
        """The staging buffer a reduction's kernel allocates while it runs
        (``memory.staged_bytes``), by its input's type and strides (``fmt``'s
        ``INPUT_STRIDES`` where it is a strided view) and its axes' value."""
        axes = None
        if len(args) > 1 and args[1] is not None:
            axes = concrete(args[1])
            if axes is None:
                return 0
        strides = dict(fmt).get(INPUT_STRIDES) if fmt else None
        return staged_bytes(op, in_types[0] if in_types else None, axes, self.hw.sm_count,
                            strides)

    def _cost(self, op: Op, ins: tuple[Type | None, ...], outs: tuple[Type | None, ...],
              fmt: tuple[tuple[str, Any], ...] | None = None) -> OpCost:
        """The op's cost by its rule, memoized by (op type, types, attributes); ``fmt``,
        for an op of strided inputs (``layout.Layouts.op_layout``: a convolution's format
        and copied inputs, an indexing op's distinct index elements), reaches the rule as
        more attributes."""
        key = (op.op_type, ins, op.attrs_key, outs) if fmt is None else \
            (op.op_type, ins, op.attrs_key, outs, fmt)
        c = self._costs.get(key)
        if c is None:
            rule = COST_RULES.get(op.op_type)
            attrs = self.attrs_of(op)
            if fmt is not None:
                attrs = {**attrs, **dict(fmt)}
            if rule is None:
                if not self.fallback:
                    raise SimulationError(
                        f"no cost rule for op '{op.op_type}': add one to "
                        "distir/analysis/cost/, or simulate with fallback=True (--fallback) "
                        "to cost it as a memory-bound kernel")
                self.uncosted[op.op_type] = None
                # (``outs`` holds None only for ops whose rule skips unused results.)
                c = fallback_cost(op.op_type, ins, outs, attrs, self.hw)  # type: ignore[arg-type]
            else:
                c = rule(op.op_type, ins, outs, attrs, self.hw)
            self._costs[key] = c
        return c

    def _classes(self, args: tuple, ids: tuple[int, ...]) -> tuple[int, ...]:
        """The clock classes of a call: for each of its entry keys (``entry_keys``), the
        index of its class, keys being in one class when their clocks are the same vector
        object with the same shift (devices synchronized by a collective or a call, or
        untouched so far). A class is one entry symbol in the callee's summary, which is
        exact (``x + max(a, b) == max(x + a, x + b)``, rounding being monotone) and keeps
        the callee's clock vectors as wide as the classes, not the devices: a replica's
        whole pipeline schedule in one call (``dtp``'s ``@replica``) spans 2 x its devices
        of keys but few classes. Part of the summary's key."""
        keys = self._entry_keys.get(ids)
        if keys is None:
            keys = self._entry_keys[ids] = entry_keys(args, self._host)
        base, shift = self._base, self._shift
        initial = base.initial
        seen: dict[tuple[int, float], int] = {}
        out = []
        for k in keys:
            v = base.get(k)
            if v is None:
                v = initial(k)
            out.append(seen.setdefault((id(v), shift.get(k, 0.0)), len(seen)))
        return tuple(out)

    def _summary(self, callee: Function, args: tuple, given: bytes,
                 drop: frozenset[int], waiting: tuple[int, ...],
                 cls: tuple[int, ...], strided: tuple = (), ex: tuple = ()) -> CallSummary:
        """A new call key's summary: the summary of the call on canonical devices, renamed
        to this call's (made once per canonical call), where renaming is exact; else the
        callee simulated on these arguments."""
        if self._rename and device_free(callee, self._device_free):
            uniq = dict(zip(map(id, args), args))  # arguments are interned
            sigma = canonical_devices(uniq.values(), self.hw.devices_per_node)
            if sigma is not None:
                ren = {i: self._rename_value(a, sigma) for i, a in uniq.items()}
                cargs = tuple(map(ren.__getitem__, map(id, args)))
                cex = tuple((pos, tuple((sigma[d], b) for d, b in e)) for pos, e in ex)
                ckey = (id(callee), tuple(map(id, cargs)), given, drop, waiting, cls,
                        strided, cex)
                cs = self._summaries.get(ckey)
                if cs is None:
                    cs = self._summaries[ckey] = self._summarize(callee, cargs, given, drop,
                                                                 waiting, cls, cex)
                inv = {c: d for d, c in sigma.items()}
                return rename_summary(cs, inv, lambda v: self._rename_value(v, inv))
        return self._summarize(callee, args, given, drop, waiting, cls, ex)

    def _rest(self, storage: tuple, part: Any) -> tuple:
        """The bytes of a storage (``storage``: per device) beyond those of its ``part``,
        per device."""
        rest = dict(storage)
        for d, b in self._bytes(part):
            rest[d] = rest.get(d, 0) - b
        return tuple((d, b) for d, b in rest.items() if b)

    def _rename_value(self, v: Any, m: dict[int, int]) -> Any:
        """``v`` on the devices ``m`` gives its own, interned (so identities stand for
        values), cached by (identity, device) for values on one device."""
        if v is None:
            return None
        devs = type_of(v).devices
        if len(devs) == 1:
            key = (id(v), m[devs[0]])
            r = self._renamed.get(key)
            if r is None:
                r = rename_value(v, m)
                r = self._renamed[key] = self._canon.setdefault(r, r)
            return r
        r = rename_value(v, m)
        return self._canon.setdefault(r, r)

    def _summarize(self, callee: Function, args: tuple, given: bytes,
                   drop: frozenset[int], waiting: tuple[int, ...],
                   cls: tuple[int, ...], ex: tuple = ()) -> CallSummary:
        """Simulate ``callee`` once with symbolic entry clocks (one per clock class
        ``cls`` of its entry keys) and relative memory, owning the arguments ``given`` and
        freeing the results ``drop`` inside; the arguments ``waiting`` are pending, each
        ready at its own symbol ``arg_key(i)``; ``ex``: ``(position, bytes)`` of the
        arguments owned as parts of a storage, freed with the rest of its bytes."""
        saved = self._save()
        first: dict[int, int] = {}
        sym = {}
        for k, c in zip(entry_keys(args, self._host), cls, strict=True):
            r = first.setdefault(c, k)
            if r != k:
                sym[k] = r
        self._new_state(top=False, owned=given, sym=sym, extra=dict(ex) if ex else None)
        self._drop = drop
        for i in waiting:
            self._pending[callee.params[i]] = (type_of(args[i]).devices[0], {arg_key(i): 0.0})
        try:
            outs = self.run(callee, args)
            base, shift = self._base, self._shift
            # Equal delay vectors (devices synchronized by a collective) are one object, so
            # a call applies each once (``_apply``).
            same: dict[frozenset, dict[int, float]] = {}
            vecs: dict[int, dict[int, float]] = {}
            for d in (*base, *(d for d in shift if d not in base)):
                sh = shift[d]
                v = {k: x + sh for k, x in base[d].items()}
                vecs[d] = same.setdefault(frozenset(v.items()), v)
            comp, comm, host, n = self._busy()
            pend = self._pending
            left = tuple((i, *pend[r]) for i, r in enumerate(callee.returns) if r in pend)
            return CallSummary(callee, outs, vecs, comp, comm,
                               {d: p for d, p in self._peak.items() if p},
                               {d: x for d, x in self._mem.items() if x}, self._events, n,
                               left, host=host, has_async=self._async, held=self._ret_held)
        finally:
            self._restore(saved)

    def _apply(self, s: CallSummary, op: Op, waiting: tuple[int, ...] = ()) -> None:
        """Advance the clocks and memory by a call's summary (``op``: the call, whose
        arguments ``waiting`` are pending)."""
        base = self._base
        shift = self._shift
        ready = {arg_key(i): self._pending[op.inputs[i]][1]  # type: ignore[index]
                 for i in waiting}
        if s.has_async:
            self._async = True

        def at_entry(vec: dict[int, float]) -> dict[int, float]:
            # Entry symbols whose clocks share one vector object (synchronized devices)
            # take the largest delay first: one pass over that vector, not one per symbol
            # (x + max(a, b) == max(x + a, x + b) exactly, rounding being monotone).
            groups: dict[int, list] = {}
            for k, v in vec.items():
                if k <= _ARG0:
                    sk, bk = v, ready[k]
                else:
                    sk, bk = shift[k] + v, base[k]
                g = groups.get(id(bk))
                if g is None:
                    groups[id(bk)] = [bk, sk]
                elif sk > g[1]:
                    g[1] = sk
            if len(groups) == 1:
                for bk, sk in groups.values():
                    return {kk: vv + sk for kk, vv in bk.items()}
            m: dict[int, float] = {}
            for bk, sk in groups.values():
                for kk, vv in bk.items():
                    x = vv + sk
                    if x > m.get(kk, _NEG):
                        m[kk] = x
            return m

        # Devices sharing a delay vector (see ``_summarize``) share the entry vector too.
        done: dict[int, dict[int, float]] = {}
        new = []
        for d, vec in s.vecs.items():
            m = done.get(id(vec))
            if m is None:
                m = done[id(vec)] = at_entry(vec)
            new.append((d, m))
        if s.pending:
            outs = op.outputs
            for i, dev, vec in s.pending:
                self._pending[outs[i]] = (dev, at_entry(vec))
        for d, m in new:
            base[d] = m
            shift[d] = 0.0
        self._events.append((s, None, op))
        self._calls.append(s)
        mem = self._mem
        peak = self._peak
        for d, p in s.peak.items():
            x = mem[d] + p
            if x > peak[d]:
                peak[d] = x
        for d, n in s.net.items():
            mem[d] += n

    # -- entry point ---------------------------------------------------------------------
    def simulate_function(self, fn: Function | Module | ReplicaProgram,
                          batch_size: int | None = None, *,
                          input_types: Sequence[Type | None] | None = None) -> Simulation:
        """``simulate(fn, ...)`` on this simulator: its caches (op records, costs, call
        summaries; with ``share_equal_functions``, across equal functions of different
        programs) serve every program it simulates. No warning for uncosted ops: they
        are listed in ``Simulation.uncosted_ops``. A ``ReplicaProgram`` is simulated once
        and its figures expanded to every replica and rank (``distir.analysis.replicas``)."""
        from distir.analysis.api import _input_values

        if isinstance(fn, Module):
            fn = fn.entry
        if batch_size is not None and batch_size <= 0:
            raise SimulationError(f"batch size must be positive, got {batch_size}")
        if isinstance(fn, ReplicaProgram):
            fn.check(self.hw)
            one = self.simulate(fn.fn, _input_values(fn.fn, input_types),
                                batch_size=batch_size)
            return fn.expand(one)
        return self.simulate(fn, _input_values(fn, input_types), batch_size=batch_size)

    def _end_program(self) -> None:
        """Forget what only the program just simulated used: its function objects (by id)
        and their liveness, keeping the representatives' (so a long search holds only
        what distinct functions need)."""
        self._entry_keys.clear()
        # Strides: the functions' facts go, a callee's returned strides stay while its
        # summaries may (``_callees`` keeps each summarized callee alive).
        self._layout_tracker.forget(self._callees.keys())
        # The last function run's liveness (keyed by its ops) and the op hook bound to it
        # would keep the whole program alive until the next one.
        self._lv = {}
        self._root_frees = None
        self._fl = self._fn_now = self._maybe = None
        if self._entry is not None:
            self.entry_flips = self._flips.get((id(self._entry), frozenset()), frozenset())
        self._entry = None
        self.__dict__.pop("eval_op", None)
        # Summaries renamed to this program's devices are cheap to make again (the
        # canonical ones stay); their keys hold every argument's id.
        for k in self._renamed_keys:
            self._summaries.pop(k, None)
        self._renamed_keys.clear()
        if len(self._recs) > KEEP_RECORDS:
            # Records of one program's top-level ops are mostly its own (their arguments
            # name its devices): beyond this many, start afresh. Records are keyed by
            # their arguments themselves, so dropping them is exact.
            self._recs.clear()
            self._rec_by_id.clear()
            self._costs.clear()
            self._copied_t.clear()
            self._placed.clear()
            self._renamed.clear()
        if self._reps is None:
            self._flips.clear()
            self._live_memo.views.clear()
            return
        self._rep_of.clear()
        self._forget_large()
        keep = {id(f) for f in self._reps}
        facts = self._live_memo.facts
        for k in [k for k in facts if k[0] not in keep]:
            del facts[k]
        for k in [k for k in self._flips if k[0] not in keep]:
            del self._flips[k]
        views = self._live_memo.views
        for k in [k for k in views if k[0] not in keep]:
            del views[k]

    def simulate(self, fn: Function, args: Sequence[Any], *, batch_size: int | None = None,
                 ) -> Simulation:
        """Simulate ``fn`` on abstract arguments ``args`` (types or concrete values)."""
        try:
            return self._simulate(fn, args, batch_size)
        finally:
            self._end_program()

    def _simulate(self, fn: Function, args: Sequence[Any], batch_size: int | None,
                  ) -> Simulation:
        # (One tracker for every program: summaries of calls outlive a program.)
        self._layouts = self._layout_tracker if self._has_layout_ops(fn) else None
        self._entry = fn
        self._new_state(top=True, owned=(False,) * len(fn.params))
        self._drop = frozenset()
        canon = self._canon
        args = [a if a is None else canon.setdefault(a, a) for a in args]
        mem, peak = self._mem, self._peak
        nbytes = self._bytes
        for a in args:
            for d, b in nbytes(a):
                mem[d] += b
                peak[d] = max(peak[d], mem[d])
        with no_gc():
            outs = self.run(fn, args)
        for o in outs:
            for d in type_of(o).devices:
                mem[d] += 0  # a device holding only results still appears
        base, shift = self._base, self._shift
        clocks = set(base) | set(shift)
        devices = sorted(d for d in clocks | set(mem) if d >= 0)
        # The step ends when every device's compute and communication clocks have.
        latency = max((base[k][ROOT] + shift[k] for k in clocks), default=0.0)
        if self.hw.overlap_comm_slowdown and self._async:
            # Collectives stretched by the bandwidth-bound compute beside them: that needs
            # concrete clocks, so the step is replayed (calls expanded) for its end.
            from distir.analysis.trace import replay

            latency = replay(self._events, fn.name, self.hw.overlap_slowdown,
                             self.hw.overlap_comm_slowdown, listed=False)[1]
        comp_d, comm_d, host_d, n_ops = self._busy()
        comp = {d: comp_d.get(d, 0.0) for d in devices}
        comm = {d: comm_d.get(d, 0.0) for d in devices}
        busy = {d: comp[d] + comm[d] for d in devices}
        sim = Simulation(
            hardware=self.hw, function=fn.name, latency_s=latency, devices=tuple(devices),
            busy_s=busy, compute_s=comp, comm_s=comm,
            idle_s={d: max(latency - busy[d], 0.0) for d in devices},
            peak_memory_bytes={d: peak.get(d, 0) for d in devices},
            batch_size=batch_size, num_ops=n_ops,
            uncosted_ops=tuple(sorted(self.uncosted)),
            host_s={d: host_d.get(d, 0.0) for d in devices} if self._host else {},
            _events=self._events)
        self._new_state(top=True, owned=())
        return sim


@dataclass
class Simulation:
    """The simulated cost of one step.

    ``latency_s``: when the last device finishes (s). Per device (dicts keyed by device):
    ``busy_s`` = ``compute_s`` + ``comm_s`` (s of ops running), ``idle_s`` = latency minus
    busy, floored at 0 (an all-reduce that overlaps compute counts in both),
    ``peak_memory_bytes`` (liveness peak, see ``distir.analysis.memory``).
    ``throughput`` is ``batch_size / latency_s`` samples/s when a batch size was given.
    ``num_ops`` counts the ops simulated, those inside calls included. ``host_s``: where
    the profile models host dispatch, the seconds each device's host spends issuing its
    ops (a device whose ``host_s`` nears the latency is host-bound); empty otherwise.
    """

    hardware: Hardware
    function: str
    latency_s: float
    devices: tuple[int, ...]
    busy_s: dict[int, float]
    compute_s: dict[int, float]
    comm_s: dict[int, float]
    idle_s: dict[int, float]
    peak_memory_bytes: dict[int, int]
    batch_size: int | None = None
    num_ops: int = 0
    uncosted_ops: tuple[str, ...] = ()
    host_s: dict[int, float] = field(default_factory=dict)
    replicas: tuple[int, int] | None = None
    """For a ``ReplicaProgram``'s simulation, ``(replicas, stride)``: the figures are every
    replica's, the events replica 0's, repeated by ``events()``."""
    peers: int = 1
    """For a ``ReplicaProgram``'s simulation, its tensor-parallel ranks written as one
    (``ReplicaProgram.peers``): the figures are every rank's, the events rank 0's,
    repeated by ``events()``."""
    _events: list = field(default_factory=list, repr=False)

    @property
    def throughput(self) -> float | None:
        """Samples per second, or ``None`` without a batch size."""
        if self.batch_size is None or self.latency_s <= 0:
            return None
        return self.batch_size / self.latency_s

    @property
    def memory_capacity_bytes(self) -> int:
        """What a device offers the program's tensors (``Hardware.usable_memory_bytes``)."""
        return self.hardware.usable_memory_bytes

    @property
    def held_bytes(self) -> dict[int, int]:
        """Per device, what the caching allocator hands out at the peak: the liveness peak
        plus the math libraries' workspaces (``Hardware.workspace_held``: blocks of the
        allocator that no value of the program names). What ``torch.cuda.max_memory_allocated``
        measures."""
        w = self.hardware.workspace_held
        return {d: p + w for d, p in self.peak_memory_bytes.items()} if w else \
            self.peak_memory_bytes

    @property
    def out_of_memory(self) -> tuple[int, ...]:
        """The devices whose peak memory, with the libraries' workspaces (``held_bytes``),
        exceeds what the profile's devices offer tensors (the capacity less its
        ``reserved_bytes``)."""
        cap = self.hardware.usable_memory_bytes
        return tuple(d for d, p in self.held_bytes.items() if p > cap)

    @property
    def fits_in_memory(self) -> bool:
        return not self.out_of_memory

    def events(self) -> list[tuple[float, float, tuple[int, ...], Op, Any, str]]:
        """Every op's ``(start_s, seconds, devices, op, detail, function name)`` in program
        order, calls expanded (``detail`` is ``(OpCost, input types, result types, ...)``)."""
        from distir.analysis.trace import expand_events

        evs = expand_events(self._events, self.function, self.hardware.overlap_slowdown,
                            self.hardware.overlap_comm_slowdown)
        if self.replicas is None:
            return evs
        from distir.analysis.replicas import expand_replica_events

        return expand_replica_events(evs, *self.replicas, self.peers)

    def write_trace(self, path: str) -> None:
        """Write the timeline as Chrome trace JSON (one track per device; opens in
        Perfetto or chrome://tracing)."""
        from distir.analysis.trace import write_chrome_trace

        write_chrome_trace(self, path)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (device keys as strings)."""
        def per(d: dict[int, Any]) -> dict[str, Any]:
            return {str(k): v for k, v in d.items()}

        return {
            "function": self.function,
            "hardware": self.hardware.name,
            "calibrated": self.hardware.calibrated,
            "latency_s": self.latency_s,
            "batch_size": self.batch_size,
            "throughput_samples_per_s": self.throughput,
            "num_ops": self.num_ops,
            "devices": list(self.devices),
            "busy_s": per(self.busy_s),
            "compute_s": per(self.compute_s),
            "comm_s": per(self.comm_s),
            "idle_s": per(self.idle_s),
            **({"host_s": per(self.host_s)} if self.host_s else {}),
            "peak_memory_bytes": per(self.peak_memory_bytes),
            "held_bytes": per(self.held_bytes),
            "memory_capacity_bytes": self.hardware.usable_memory_bytes,
            "out_of_memory_devices": list(self.out_of_memory),
            "uncosted_ops": list(self.uncosted_ops),
        }


def simulate(fn: Function | Module | ReplicaProgram, hardware: Hardware | str = "h100-sxm",
             batch_size: int | None = None, *,
             input_types: Sequence[Type | None] | None = None,
             fallback: bool = False) -> Simulation:
    """Simulate one step of ``fn`` (a module's entry function) on ``hardware`` (a profile
    name, a path to a profile file, or a ``Hardware``).

    A ``ReplicaProgram`` (``dtp_replica``: one of several identical data-parallel
    replicas, tensor-parallel ranks), or a function whose ``Replica*`` and ``Peer*``
    ops name the other copies' devices, is simulated as the program of every
    copy.

    ``input_types`` override the parameters' declared types (as in ``infer_types``);
    ``batch_size`` gives ``Simulation.throughput``. An op without a cost rule is a
    ``SimulationError`` naming it; with ``fallback=True`` it is costed as a memory-bound
    kernel and a ``CostFallbackWarning`` lists such ops.
    """
    if isinstance(fn, Module):
        fn = fn.entry
    if isinstance(fn, Function):  # a replica program read from a file describes itself
        fn = replica_program(fn) or fn
    result = Simulator(hardware, fallback=fallback).simulate_function(
        fn, batch_size, input_types=input_types)
    if result.uncosted_ops:
        warnings.warn("no cost rule for " + ", ".join(result.uncosted_ops) + "; costed as "
                      "memory-bound kernels (distir.analysis.cost.fallback_cost)",
                      CostFallbackWarning, stacklevel=2)
    return result
