"""Lowering per-rank programs to PyTorch: the table of op lowerings and the compiled program.

``LOWERINGS`` is the one table, keyed by op name, of how each op runs in PyTorch. An entry
is a *compiler*: given what is known about one op before anything runs (``Static``: the
attributes, the input and result types, the inputs whose values are known, the device, the
process groups) it returns a *kernel*, a function from input tensors to a tuple of result
tensors. Everything that depends only on types (shapes, slices, permutations, constants,
process groups, buffer sizes) is computed once there, never per step.

Entries are registered by ``distir.backend.ops_onnx``, ``ops_nn``, ``ops_index``,
``ops_resize``, ``ops_recurrent``, ``ops_train`` and ``ops_comm`` (one module per family),
imported by ``load_lowerings()``.

``compile_program`` turns a ``RankProgram`` into a ``CompiledProgram``: a list of kernels
over numbered slots, with the slots to free after each op (so a tensor lives exactly as long
as the program needs it, as in the simulator's liveness), per communication op the inputs
it may overwrite (its last use, with no live alias, never a parameter or a result), and
per op the results of asynchronous collectives it is the first to read (it waits for them:
the simulator's overlap semantics, see ``ASYNC_OPS``).
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from distir.analysis.rules import RuleTable, full_attrs
from distir.errors import UnsupportedError
from distir.ir.types import DType, ScalarType, TensorType, Type

if TYPE_CHECKING:
    import torch

    from distir.analysis.projection import RankProgram
    from distir.backend.groups import GroupCache

__all__ = ["LOWERINGS", "Lowering", "Static", "CompiledProgram", "compile_program",
           "known_inputs", "KNOWN_MAX_ELEMENTS", "isolated",
           "synchronizer", "load_lowerings", "torch_dtype", "SimulatedOOM", "is_oom"]

Kernel = Callable[..., tuple]


@dataclass(frozen=True, slots=True)
class Lowering:
    """One table entry. ``view``: a result may share storage with an input (so it must
    not be overwritten while the input lives, and vice versa). ``comm``: a communication
    op (its kernel must be run, with dummy inputs, even after a failure elsewhere on this
    rank, so that its peers are not left waiting). ``cached``: the kernel returns a tensor
    it made at compile time (which must then never be overwritten). ``asynchronous``: the
    kernel starts the op (an ``async_op`` collective, for the ops of ``ASYNC_OPS``) and
    returns its results followed by the work handle; the program waits on the handle
    right before the first op that reads a result, so the compute between overlaps it."""

    compile: Callable[[Static], Kernel]
    view: bool = False
    comm: bool = False
    cached: bool = False
    asynchronous: bool = False


LOWERINGS = RuleTable("lowering", entry=Lowering)
"""The lowerings, keyed by op name:
``LOWERINGS.register(*ops, view=, comm=, cached=, asynchronous=)``."""
_MODULES = ["distir.backend.ops_onnx", "distir.backend.ops_nn", "distir.backend.ops_train",
            "distir.backend.ops_comm", "distir.backend.ops_index", "distir.backend.ops_resize",
            "distir.backend.ops_recurrent"]
_loaded: list[bool] = []


def load_lowerings() -> None:
    """Import every lowering module once."""
    if _loaded:
        return
    for name in _MODULES:
        importlib.import_module(name)
    _loaded.append(True)


_TORCH_DTYPES: dict[DType, Any] = {}


def torch_dtype(dt: DType) -> torch.dtype:
    """The torch dtype of a DistIR dtype."""
    if not _TORCH_DTYPES:
        import torch

        _TORCH_DTYPES.update({
            DType.Bool: torch.bool, DType.Int8: torch.int8, DType.Int32: torch.int32,
            DType.Int64: torch.int64, DType.Float16: torch.float16,
            DType.BFloat16: torch.bfloat16, DType.Float32: torch.float32,
            DType.Float64: torch.float64})
    return _TORCH_DTYPES[dt]


@dataclass(frozen=True, slots=True)
class Static:
    """What is known about one op of a rank's program before it runs.

    ``consts[i]`` is input i's value when the program fixes it (a ``Constant``), else
    ``None``. ``live_outputs[j]`` says whether result j is used later (a kernel may return
    ``None`` for a dead one). ``donate[i]``: the kernel may overwrite input i.
    """

    op_type: str
    attrs: dict[str, Any]
    in_types: tuple[Type | None, ...]
    out_types: tuple[Type | None, ...]
    consts: tuple[np.ndarray | None, ...]
    live_outputs: tuple[bool, ...]
    donate: tuple[bool, ...]
    device: Any
    rank: int
    groups: GroupCache | None

    def out(self, j: int = 0) -> TensorType:
        """Result j's type, as a tensor type (a scalar is a 0-d tensor)."""
        t = self.out_types[j]
        if t is None:
            raise UnsupportedError(f"{self.op_type}: result {j} has no type")
        return as_tensor_type(t)

    def inp(self, i: int) -> TensorType:
        t = self.in_types[i]
        if t is None:
            raise UnsupportedError(f"{self.op_type}: input {i} is omitted")
        return as_tensor_type(t)

    def const(self, i: int) -> np.ndarray | None:
        return self.consts[i] if i < len(self.consts) else None

    def empty(self, t: TensorType) -> torch.Tensor:
        """An uninitialized tensor of type ``t`` on this rank's device."""
        import torch

        return torch.empty(t.shape, dtype=torch_dtype(t.dtype), device=self.device)


def as_tensor_type(t: Type | None) -> TensorType:
    if isinstance(t, TensorType):
        return t
    if isinstance(t, ScalarType):
        return TensorType(t.dtype, (), t.device)
    raise UnsupportedError(f"the PyTorch backend runs tensors and scalars, not {t}")


class SimulatedOOM(MemoryError):
    """Raised when a program would exceed the memory limit given to the run (the limit is
    checked against the live bytes the types imply, on devices without an allocator cap)."""


def is_oom(exc: BaseException) -> bool:
    """Whether ``exc`` means the device (or host) ran out of memory."""
    if isinstance(exc, MemoryError):
        return True
    name = type(exc).__name__
    if name == "OutOfMemoryError":
        return True
    msg = str(exc)
    return isinstance(exc, RuntimeError) and (
        "out of memory" in msg.lower() or "CUBLAS_STATUS_ALLOC_FAILED" in msg
        or "CUDNN_STATUS_ALLOC_FAILED" in msg or "ALLOC_FAILED" in msg)


class _WaitFailed(Exception):
    """An asynchronous collective failed while the program waited for it (the cause)."""


@dataclass(slots=True)
class _Step:
    kernel: Kernel
    ins: tuple[int, ...]  # slots; -1 for an omitted input
    outs: tuple[int, ...]
    frees: tuple[int, ...]
    comm: bool
    in_types: tuple[TensorType | None, ...]
    op_type: str
    seq: int
    where: str  # the op, for messages: "MatMul (op 12)"
    asynchronous: bool = False  # the kernel returns a work handle after its results
    waits: tuple[int, ...] = ()  # input slots still being computed by an asynchronous op


class CompiledProgram:
    """A rank's program as kernels over numbered slots.

    ``run(inputs)`` executes it once on tensors for the rank's parameters (in
    ``RankProgram.fn.params`` order) and returns the rank's results. If an op fails, the
    communication ops after it still run on dummy buffers (so the other ranks finish the
    step) and the first error is raised at the end. ``progress``, when given, is the launcher's
    shared array: slots ``progress_base`` and ``+1`` receive the communication this rank is in
    and its state (2 inside it, 1 past it). ``static_peak_bytes`` is the most bytes
    the types say are live at once (parameters included, views counted as free).
    """

    def __init__(self, steps: list[_Step], n_slots: int, params: tuple[int, ...],
                 returns: tuple[int, ...], static_peak_bytes: int, limit_op: int | None,
                 device: Any, progress: Any = None, progress_base: int = 0) -> None:
        self.steps = steps
        self.n_slots = n_slots
        self.params = params
        self.returns = returns
        self.static_peak_bytes = static_peak_bytes
        self.limit_op = limit_op
        self.device = device
        self.progress = progress
        self.progress_base = progress_base
        self.failed_at: str | None = None
        """Where the last run failed (the op), or ``None``."""

    def run(self, inputs: list[Any], host_clock: list[float] | None = None,
            memory_clock: list[tuple[int, int, int]] | None = None) -> list[Any]:
        """``host_clock``, when given, receives ``time.perf_counter()`` as each op starts on
        the host and once more at the end: the host's dispatch time per op is the
        difference of neighbours (``calibration.bench_dispatch``). ``memory_clock``, when
        given, receives per op ``(most bytes allocated during it, bytes allocated once its
        dead inputs are freed, bytes reserved then)``: the CUDA caching allocator's counts
        on a GPU; elsewhere the bytes of the distinct storages the live tensors hold, twice
        (``calibration.memory_trace``; slow on large programs)."""
        env: list[Any] = [None] * self.n_slots
        tick = host_clock.append if host_clock is not None else None
        probe = None if memory_clock is None else _memory_probe(self.device, env)
        for s, x in zip(self.params, inputs):
            env[s] = x
        limit_op = self.limit_op
        progress = self.progress
        base = self.progress_base
        works: dict[int, tuple[Any, int]] = {}  # slot -> (work handle, step) of its op
        for i, st in enumerate(self.steps):
            if tick is not None:
                tick(time.perf_counter())
            try:
                if i == limit_op:
                    raise SimulatedOOM("the live tensors would exceed the memory limit")
                if st.waits:
                    for j in st.waits:
                        pw = works.pop(j, None)
                        if pw is not None:
                            self._wait(pw)
                if st.comm and progress is not None:
                    progress[base] = st.seq
                    progress[base + 1] = 2
                res = st.kernel(*[None if j < 0 else env[j] for j in st.ins])
                if st.asynchronous:
                    w = res[-1]
                    res = res[:-1]
                    for j in st.outs:
                        works[j] = (w, i)
                if st.comm and progress is not None:
                    progress[base + 1] = 1
            except BaseException as e:
                if isinstance(e, KeyboardInterrupt):
                    raise
                env.clear()
                if isinstance(e, _WaitFailed):  # a collective failed: its group is broken
                    raise e.__cause__ from None  # type: ignore[misc]
                self.failed_at = st.where
                if not st.comm:
                    self.drain(i + 1)
                elif is_oom(e):  # it failed allocating, before it reached its peers
                    self.drain(i)
                # (a collective that failed otherwise has broken its group: nothing to drain)
                raise
            for j, r in zip(st.outs, res):
                env[j] = r
            if probe is not None:
                during = probe(True)[0]
            for j in st.frees:
                env[j] = None
            if probe is not None:
                memory_clock.append((during, *probe(False)))  # type: ignore[union-attr]
        try:
            for pw in {id(pw[0]): pw for pw in works.values()}.values():  # never read
                self._wait(pw)
        except _WaitFailed as e:
            env.clear()
            raise e.__cause__ from None  # type: ignore[misc]
        if tick is not None:
            tick(time.perf_counter())
        return [env[j] for j in self.returns]

    def _wait(self, pw: tuple[Any, int]) -> None:
        """Wait for an asynchronous collective, reported to the launcher as being in it. If
        it failed, ``failed_at`` names it and ``_WaitFailed`` carries the error."""
        work, i = pw
        st = self.steps[i]
        progress = self.progress
        base = self.progress_base
        if progress is not None:
            progress[base] = st.seq
            progress[base + 1] = 2
        try:
            work.wait()
        except BaseException as e:
            if isinstance(e, KeyboardInterrupt):
                raise
            self.failed_at = st.where
            raise _WaitFailed() from e
        if progress is not None:
            progress[base + 1] = 1

    def drain(self, start: int) -> None:
        """Run the communication ops from op ``start`` on, with dummy inputs, discarding
        their results: the rank's peers then complete the step."""
        import torch

        for st in self.steps[start:]:
            if not st.comm:
                continue
            dummies = [None if t is None else
                       torch.zeros(t.shape, dtype=torch_dtype(t.dtype), device=self.device)
                       for t in st.in_types]
            res = st.kernel(*dummies)
            if st.asynchronous:
                res[-1].wait()


def synchronizer(device: Any) -> Callable[[], None]:
    """A function that waits for everything queued on ``device`` (nothing on the CPU)."""
    if getattr(device, "type", "cpu") != "cuda":
        return lambda: None
    import torch

    return lambda: torch.cuda.synchronize(device)


def isolated(compiled: CompiledProgram, sync: Callable[[], None]
             ) -> tuple[CompiledProgram, list[float]]:
    """A copy of ``compiled`` that calls ``sync`` (the device's synchronisation) after every
    op, and the list each of its runs fills with the host seconds each op's kernel took to
    return: the op's own host cost, issued to an idle device (no launch queue to wait for,
    no peer still busy). Their sum is the host time the step needs whatever its devices do;
    where it nears the step's time, the step is paced by its host
    (``RunResult.host_cost_s``, ``calibration.host_threads``)."""
    import copy
    import dataclasses

    times = [0.0] * len(compiled.steps)

    def wrap(kernel: Kernel, i: int) -> Kernel:
        def run(*args: Any) -> tuple:
            t = time.perf_counter()
            res = kernel(*args)
            times[i] = time.perf_counter() - t
            sync()
            return res
        return run

    out = copy.copy(compiled)
    out.steps = [dataclasses.replace(st, kernel=wrap(st.kernel, i))
                 for i, st in enumerate(compiled.steps)]
    return out, times


def _memory_probe(device: Any, env: list[Any]) -> Callable[[bool], tuple[int, int]]:
    """``probe(during)``: on a GPU, ``(the most bytes allocated since the previous op's
    dead inputs were freed, bytes reserved)`` when ``during`` (the op's peak, its
    transients included), else ``(bytes allocated now, bytes reserved)``; on another
    device, the bytes of the distinct storages of the tensors in ``env`` (what the live
    values hold, a view keeping all of its base's storage), twice."""
    import torch

    if device.type == "cuda":
        cuda = torch.cuda

        def gpu(during: bool) -> tuple[int, int]:
            if during:
                return cuda.max_memory_allocated(device), cuda.memory_reserved(device)
            # The next op's window starts once this one's dead inputs are freed.
            now = cuda.memory_allocated(device), cuda.memory_reserved(device)
            cuda.reset_peak_memory_stats(device)
            return now

        cuda.reset_peak_memory_stats(device)
        return gpu

    def host(during: bool) -> tuple[int, int]:
        seen: dict[int, int] = {}
        for x in env:
            if isinstance(x, torch.Tensor):
                st = x.untyped_storage()
                seen[st.data_ptr()] = st.nbytes()
        n = sum(seen.values())
        return n, n

    return host


def _type_bytes(t: Type | None) -> int:
    return 0 if t is None else t.size_bytes


class _Aliases:
    """Union-find over slots: slots whose tensors may share storage."""

    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def find(self, a: int) -> int:
        p = self.parent
        while p[a] != a:
            p[a] = p[p[a]]
            a = p[a]
        return a

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[ra] = rb


KNOWN_MAX_ELEMENTS = 64
"""The largest parameter ``known_inputs`` makes a compile-time constant."""


def known_inputs(inputs: Sequence[Any] | None) -> dict[int, np.ndarray]:
    """The parameters of a run whose values can be compiled in, by index: the small
    operands an exporter stores as initializers (torch's dynamo exporter stores every scalar
    of the forward pass so: a ``Pow``'s exponent, an attention scale, a mask's fill value;
    and shapes, axes and slice bounds as small integer vectors). Those are 0-d tensors of
    any dtype and integer tensors of at most ``KNOWN_MAX_ELEMENTS`` elements, given by the
    caller (an initializer's value or an input), never a random one. A run binds its
    inputs once for all its steps, so such a value is a constant of the run: a lowering then
    reads it at compile time, as for a ``Constant`` (``Static.const``), instead of as a
    device tensor at every call (a ``Pow`` of a known exponent runs PyTorch's kernel for
    that exponent, not the general power; an index operand needs no device-to-host copy).
    Weights (floating-point tensors of one or more dimensions) are never compiled in."""
    from distir.backend.worker import Filled

    out: dict[int, np.ndarray] = {}
    for i, a in enumerate(inputs or ()):
        if a is None or isinstance(a, Filled):  # (a large weight of one value: not known)
            continue
        a = np.asarray(a)
        if a.ndim == 0 or (a.dtype.kind in "iub" and a.size <= KNOWN_MAX_ELEMENTS):
            out[i] = a
    return out


def compile_program(program: RankProgram, device: Any, *, rank: int | None = None,
                    groups: GroupCache | None = None, memory_limit: int | None = None,
                    progress: Any = None,
                    known: dict[int, np.ndarray] | None = None) -> CompiledProgram:
    """Compile one rank's program for ``device``. ``known``: values of parameters (by
    index) fixed for every step the program will run (``known_inputs``), compiled in as
    constants. Raises ``UnsupportedError`` naming the first op without a lowering (before
    anything runs)."""
    load_lowerings()
    fn = program.fn
    rank = program.device if rank is None else rank
    slot: dict[int, int] = {}

    def define(v: Any) -> int:
        s = slot[id(v)] = len(slot)
        return s

    params = tuple(define(p) for p in fn.params)
    ops = fn.ops
    n_ops = len(ops)
    op_slots: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    for op in ops:
        ins = tuple(-1 if v is None else slot[id(v)] for v in op.inputs)
        outs = tuple(define(v) for v in op.outputs)
        op_slots.append((ins, outs))
    n = len(slot)
    returns = tuple(slot[id(v)] for v in fn.returns)

    # Last use of every slot; parameters, constants and results live to the end.
    last = [-1] * n
    for i, (ins, _) in enumerate(op_slots):
        for s in ins:
            if s >= 0:
                last[s] = i
    missing = [op.op_type for op in ops if op.op_type not in LOWERINGS]
    if missing:
        raise UnsupportedError(f"op '{missing[0]}' has no PyTorch lowering (in @{fn.name}); "
                               "add one to distir.backend's LOWERINGS table")
    pinned = set(params) | set(returns)
    for op, (_, outs) in zip(ops, op_slots):
        if LOWERINGS.rules[op.op_type].cached:
            pinned.update(outs)
    for s in pinned:
        last[s] = n_ops

    aliases = _Aliases(n)
    for op, (ins, outs) in zip(ops, op_slots):
        # (An in-place collective's result aliases only an input that is dead after it.)
        if LOWERINGS.rules[op.op_type].view:
            for o in outs:
                for s in ins:
                    if s >= 0:
                        aliases.union(o, s)
    class_last: dict[int, int] = {}
    for s in range(n):
        r = aliases.find(s)
        class_last[r] = max(class_last.get(r, -1), last[s])

    # Bytes each slot holds: parameters are the caller's, views hold none of their own.
    nbytes = [0] * n
    for op, (_, outs) in zip(ops, op_slots):
        if not LOWERINGS.rules[op.op_type].view:
            for v, o in zip(op.outputs, outs):
                nbytes[o] = _type_bytes(v.type)
    live = sum(_type_bytes(p.type) for p in fn.params)
    peak = live
    limit_op: int | None = None
    consts: dict[int, np.ndarray] = {params[i]: v for i, v in (known or {}).items()
                                     if i < len(params)}
    steps: list[_Step] = []
    pending: set[int] = set()  # slots of asynchronous results not read yet
    for i, (op, (ins, outs)) in enumerate(zip(ops, op_slots)):
        entry = LOWERINGS.rules[op.op_type]
        waits = tuple(dict.fromkeys(s for s in ins if s in pending))
        pending.difference_update(waits)
        if entry.asynchronous:
            pending.update(outs)
        attrs = full_attrs(op.op_type, op.attrs)
        in_types = tuple(None if v is None else v.type for v in op.inputs)
        out_types = tuple(v.type for v in op.outputs)
        live_outs = tuple(last[o] > i for o in outs)
        donate = tuple(s >= 0 and s not in pinned and class_last[aliases.find(s)] <= i
                       and ins.count(s) == 1 for s in ins)
        static = Static(op.op_type, attrs, in_types, out_types,
                        tuple(None if s < 0 else consts.get(s) for s in ins), live_outs,
                        donate, device, rank, groups)
        try:
            kernel = entry.compile(static)
        except UnsupportedError as e:
            raise UnsupportedError(f"in @{fn.name}, {op.op_type}: {e.message}") from None
        value = _const_value(attrs) if op.op_type == "Constant" else None
        if value is not None:
            consts[outs[0]] = value
        live += sum(nbytes[o] for o in outs)
        if live > peak:
            peak = live
        if memory_limit is not None and limit_op is None and peak > memory_limit:
            limit_op = i
        frees = tuple(sorted(s for s in {*ins, *outs} if s >= 0 and last[s] <= i))
        live -= sum(nbytes[s] for s in frees)
        seq = int(attrs.get("seq", -1))
        where = f"{op.op_type} (op {i}" + (
            f", communication {seq} over devices {list(attrs['group'])})" if seq >= 0
            else ")")
        steps.append(_Step(kernel, ins, outs, frees, entry.comm,
                           tuple(None if t is None else as_tensor_type(t) for t in in_types),
                           op.op_type, seq, where, entry.asynchronous, waits))
    return CompiledProgram(steps, n, params, returns, peak, limit_op, device, progress,
                           3 * rank)


def _const_value(attrs: dict[str, Any]) -> np.ndarray | None:
    v = attrs.get("value")
    if v is not None and hasattr(v, "array"):
        return np.array(v.array)
    return None
