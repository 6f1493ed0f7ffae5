"""Launching runs: local worker processes kept across programs, and ``torchrun``.

``Session(world_size, backend)`` starts one process per device (NCCL on GPUs, gloo on the
CPU) and keeps them, with their process groups, until it is closed, so running k programs
costs one start-up. The workers are fresh interpreters running distir's own worker module
(``distir.backend.procs``), never copies of the user's script, so ``distir.run`` works from
a plain script, a notebook or ``python -c`` without an ``if __name__ == "__main__":``
guard. Each ``Session.run`` projects the program (``distir.analysis.projection``), sends
every worker its rank's program as DistIR text (pickled IR where ``lark`` is missing) with
its inputs as numpy arrays (``distir.backend.wire``), and waits for their results under a
watchdog:

- a rank out of memory gives a ``RunResult`` with ``status == "oom"`` (not an exception);
- an error in any rank raises a one-line ``DistIRError`` (``UnsupportedError`` for an op
  without a lowering, ``BackendError`` otherwise) and leaves the session usable;
- a hang (no rank makes progress for ``timeout_s`` plus a grace period) or a dead worker
  kills every worker and raises ``BackendError`` saying which communication each rank was
  in; the next ``run`` starts fresh workers.

Workers ignore interrupts (they run in a session of their own; the launcher stops them)
and exit by themselves when the launcher disappears; ``close`` (and leaving the ``with``
block, whatever the reason) terminates and then kills any that remain.

Under ``torchrun`` (the ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` variables set),
``TorchrunSession`` runs this process's rank in place, with ``env://`` rendezvous, and
gathers the results on rank 0.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from distir.analysis.projection import Projection, project
from distir.backend.procs import LocalWorkers
from distir.backend.timing import COMM_ERROR, ERROR, OOM, RankResult, RunResult
from distir.backend.wire import task_message
from distir.backend.worker import RankTask
from distir.errors import BackendError, ConfigError, DistIRError, ExecutionError
from distir.ir.core import Function, Module
from distir.ir.types import DType, TensorType

__all__ = ["Session", "TorchrunSession", "resolve_backend", "in_torchrun", "prepare"]

GRACE_S = 15.0
"""How much longer than the collective timeout the launcher waits before declaring a
hang (so a worker's own timeout error, which says more, usually arrives first)."""


def in_torchrun() -> bool:
    """Whether this process was started by ``torchrun`` (or another env:// launcher)."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))


def resolve_backend(backend: str | None, world_size: int, *, local_devices: int | None = None,
                    ) -> str:
    """``"nccl"`` or ``"gloo"``: the one asked for, checked, or NCCL when there are enough
    GPUs for one process per device and gloo otherwise."""
    import torch

    n_gpu = torch.cuda.device_count() if torch.cuda.is_available() else 0
    need = world_size if local_devices is None else local_devices
    if backend is None:
        return "nccl" if n_gpu >= need and n_gpu > 0 else "gloo"
    if backend not in ("nccl", "gloo"):
        raise ConfigError(f"unknown backend {backend!r}: use \"nccl\" (GPUs) or \"gloo\" (CPU)")
    if backend == "nccl" and n_gpu < need:
        raise ConfigError(f"the nccl backend needs {need} GPU(s), this machine has {n_gpu}: "
                          "use --backend gloo to run on the CPU")
    return backend


def prepare(fn: Function | Module | Projection, world_size: int | None,
            inputs: Sequence[Any] | None) -> tuple[Projection, list[Any] | None]:
    """The projection of ``fn`` over ``world_size`` devices, and the full list of entry
    arguments (given inputs and initializer values, ``None`` where a random one will do;
    ``None`` when nothing is given)."""
    from distir.analysis.api import bind_inputs

    if isinstance(fn, Projection):
        proj = fn
        if inputs is not None and len(inputs) != len(proj.param_types):
            raise ExecutionError(f"@{proj.name} takes {len(proj.param_types)} inputs, "
                                 f"{len(inputs)} given")
        args: list[Any] | None = None if inputs is None else [np.asarray(x) for x in inputs]
    else:
        if isinstance(fn, Module):
            fn = fn.entry
        proj = project(fn, world_size=world_size)
        if inputs is not None:
            args = list(bind_inputs(fn, inputs))
        elif fn.initializers:
            args = [fn.initializers.get(p.name or "") for p in fn.params]
        else:
            args = None
    if args is not None:
        for i, (a, t) in enumerate(zip(args, proj.param_types)):
            if a is None:
                continue
            _check_input(proj, i, a, t)
    if world_size is not None and proj.world_size != world_size:
        raise ConfigError(f"@{proj.name} is projected on {proj.world_size} devices, but "
                          f"{world_size} processes run it")
    return proj, args


def _check_input(proj: Projection, i: int, a: np.ndarray, t: Any) -> None:
    if not isinstance(t, TensorType):
        return
    try:
        dt = DType.from_np(a.dtype)
    except KeyError:
        dt = None
    if dt is not t.dtype or tuple(a.shape) != t.shape:
        got = f"{dt.value if dt else a.dtype} {tuple(a.shape)}"
        raise ExecutionError(f"input {i} of @{proj.name} is {got}, the program takes "
                             f"{t.dtype.value} {t.shape}: pass an array of that dtype and "
                             "shape")


def make_tasks(proj: Projection, args: list[Any] | None, *, steps: int, warmup: int,
               want_outputs: bool, memory_limit: int | None, seed: int,
               profile: str | None = None, profile_marks: bool = True,
               cuda_graph: bool = False, host_cost: bool = False) -> list[RankTask]:
    if steps < 1 or warmup < 0:
        raise ConfigError(f"steps must be at least 1 and warmup at least 0, got steps={steps}, "
                          f"warmup={warmup}")
    _preflight(proj)
    tasks = []
    for prog in proj.programs:
        ins = None if args is None else [args[i] for i in prog.param_index]
        tasks.append(RankTask(proj.name, prog, proj.groups, ins, steps, warmup, want_outputs,
                              memory_limit, seed, profile, profile_marks, cuda_graph,
                              host_cost))
    return tasks


def _preflight(proj: Projection) -> None:
    """Report an op without a lowering before any worker sees the program."""
    from distir.backend.lowering import LOWERINGS, load_lowerings
    from distir.errors import UnsupportedError

    load_lowerings()
    for prog in proj.programs:
        for op in prog.fn.ops:
            if op.op_type not in LOWERINGS:
                where = f"{op.loc}: " if op.loc is not None else ""
                raise UnsupportedError(f"{where}op '{op.op_type}' has no PyTorch lowering; "
                                       "add one to distir.backend's LOWERINGS table")


def combine(proj: Projection, backend: str, results: Sequence[RankResult], steps: int,
            warmup: int, cuda_graph: bool = False) -> RunResult:
    """The run's result from its ranks' (raising for an error on any rank). With
    ``cuda_graph`` the warm-up recorded is the one the ranks ran (at least 3 steps)."""
    bad = [r for r in results if r.status in (ERROR, COMM_ERROR)]
    if bad:
        r = bad[0]
        raise _error_class(r.error_type)(f"@{proj.name} failed on rank {r.rank} {r.message}"
                                         if r.message.startswith("at ") else
                                         f"@{proj.name} failed on rank {r.rank}: {r.message}")
    ooms = [r for r in results if r.status == OOM]
    res = RunResult(proj.name, backend, len(results), steps,
                    max(warmup, 3) if cuda_graph else warmup,
                    peak_memory_bytes=[r.peak_memory_bytes for r in results],
                    static_peak_bytes=[r.static_peak_bytes for r in results],
                    device_name=results[0].device_name if results else "",
                    cuda_graph=cuda_graph)
    if ooms:
        res.status = "oom"
        res.oom_ranks = [r.rank for r in ooms]
        res.message = "; ".join(
            f"rank {r.rank} ran out of memory" + (" " if r.message.startswith("at ") else ": ")
            + r.message for r in ooms)
        return res
    res.rank_times_s = [list(r.times_s) for r in results]
    res.nonfinite = [r.nonfinite for r in results]
    if any(r.host_cost_s is not None for r in results):
        res.host_cost_s = [r.host_cost_s for r in results]
    if any(r.outputs is not None for r in results):
        outs: list[Any] = [None] * len(proj.return_types)
        for prog, r in zip(proj.programs, results):
            for j, o in zip(prog.return_index, r.outputs or ()):
                outs[j] = o
        res.outputs = outs
    return res


def _error_class(name: str) -> type[DistIRError]:
    import distir.errors as errors

    cls = getattr(errors, name, None)
    if isinstance(cls, type) and issubclass(cls, DistIRError):
        return cls
    return BackendError


class Session:
    """Local worker processes, one per device, kept across programs.

    >>> with Session(2, backend="gloo") as s:          # doctest: +SKIP
    ...     r1 = s.run(fn1)
    ...     r2 = s.run(fn2, inputs, steps=1, warmup=0)

    ``timeout_s`` bounds how long a collective may wait for its participants (and, plus a
    grace period, how long the launcher waits without any rank making progress, so it must
    exceed the longest step).
    """

    def __init__(self, world_size: int, backend: str | None = None, *, timeout_s: float = 300.0,
                 start_timeout_s: float = 300.0, watchdog_s: float | None = None) -> None:
        if world_size < 1:
            raise ConfigError(f"world size must be at least 1, got {world_size}")
        self.world_size = world_size
        self.backend = resolve_backend(backend, world_size)
        self.timeout_s = timeout_s
        self.start_timeout_s = start_timeout_s
        self.watchdog_s = timeout_s + GRACE_S if watchdog_s is None else watchdog_s
        self.device_name = ""
        self.program_format = "text"
        """How programs reach the workers: ``"text"`` (DistIR text), or ``"pickle"`` where
        the workers' Python has no ``lark``; known once the workers are ready."""
        self._workers: LocalWorkers | None = None
        self._broken = False

    # -- lifecycle ------------------------------------------------------------------------
    def __enter__(self) -> Session:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close(kill=exc[0] is not None)

    @property
    def pids(self) -> list[int]:
        return self._workers.pids if self._workers is not None else []

    @property
    def session_dir(self) -> str | None:
        """The temporary directory of the running workers' shared files, if started."""
        return self._workers.directory if self._workers is not None else None

    @property
    def started(self) -> bool:
        return self._workers is not None

    def start(self) -> None:
        """Start the workers and wait until every one has joined the process group."""
        if self._workers is not None:
            return
        self._workers = LocalWorkers(self.world_size, self.backend, self.timeout_s)
        try:
            ready: dict[int, tuple] = {}
            deadline = time.monotonic() + self.start_timeout_s
            while len(ready) < self.world_size:
                msg = self._get(deadline, "starting the workers")
                if msg[0] == "fatal":
                    raise BackendError(f"worker {msg[1]} could not start: {msg[2]}")
                if msg[0] == "ready":
                    ready[msg[1]] = msg
            self.device_name = ready[0][2]
            self.program_format = "text" if all(m[3] for m in ready.values()) else "pickle"
            self._broken = False
        except BaseException:
            self.close(kill=True)
            raise

    def close(self, kill: bool = False) -> None:
        """Stop the workers: ask them to leave (unless ``kill``), then terminate and kill
        whatever remains. Safe to call more than once."""
        workers, self._workers = self._workers, None
        if workers is not None:
            workers.stop(kill=kill)

    # -- running --------------------------------------------------------------------------
    def run(self, fn: Function | Module | Projection, inputs: Sequence[Any] | None = None, *,
            steps: int = 10, warmup: int = 3, outputs: bool | None = None,
            memory_limit: int | None = None, seed: int = 0,
            profile: str | None = None, profile_marks: bool = True,
            cuda_graph: bool = False, host_cost: bool = False) -> RunResult:
        """Run ``fn`` (a function, a module's entry, or a ready projection) on the workers:
        ``warmup`` untimed steps, then ``steps`` timed ones.

        ``inputs`` are the entry's arguments as numpy arrays (random ones of the declared
        types are drawn on each device when omitted); ``outputs`` (default: whether inputs
        were given) brings the results back. ``memory_limit`` (bytes per device) caps the
        allocator on a GPU and the live bytes by types on the CPU. ``profile`` (a
        directory) adds one untimed step after the timed ones, profiled with every op marked,
        each rank's trace in ``profile/rank{r}.json`` (``distir.backend.profiling``); with
        ``profile_marks=False`` the ops are not marked (the trace has the kernels and the
        runtime calls only, and the step the host time the marks would add).
        ``cuda_graph`` captures each rank's step as a CUDA graph after the warm-up and times
        its replays (GPU only; the host then issues one launch a step, not one call an op).
        ``host_cost`` adds one step after the timed ones (eager steps only) that measures each
        rank's host cost of a step (``RunResult.host_cost_s``, ``host_share``).
        """
        proj, args = prepare(fn, self.world_size, inputs)
        want = inputs is not None if outputs is None else outputs
        return self.run_prepared(proj, args, steps=steps, warmup=warmup, outputs=want,
                                 memory_limit=memory_limit, seed=seed, profile=profile,
                                 profile_marks=profile_marks, cuda_graph=cuda_graph,
                                 host_cost=host_cost)

    def run_prepared(self, proj: Projection, args: list[Any] | None, *, steps: int,
                     warmup: int, outputs: bool, memory_limit: int | None = None,
                     seed: int = 0, profile: str | None = None,
                     profile_marks: bool = True, cuda_graph: bool = False,
                     host_cost: bool = False) -> RunResult:
        """``run`` for a projection and its bound arguments (see ``prepare``)."""
        if proj.world_size != self.world_size:
            raise ConfigError(f"@{proj.name} is projected on {proj.world_size} devices, but "
                              f"the session has {self.world_size} processes")
        tasks = make_tasks(proj, args, steps=steps, warmup=warmup, want_outputs=outputs,
                           memory_limit=memory_limit, seed=seed, profile=profile,
                           profile_marks=profile_marks, cuda_graph=cuda_graph,
                           host_cost=host_cost)
        if self._broken:
            self.close(kill=True)
        self.start()
        text = self.program_format == "text"
        messages = [task_message(t, text=text) for t in tasks]
        w = self._workers
        assert w is not None
        for i in range(len(w.progress)):
            w.progress[i] = -1 if i % 3 == 0 else 0
        try:
            for r, m in enumerate(messages):
                w.send(r, m)  # a rank that has died is reported by _collect
            results = self._collect(proj, w, cuda_graph)
        except BaseException:
            self.close(kill=True)
            raise
        if any(r.status == COMM_ERROR for r in results):
            self._broken = True  # its process groups may be unusable: restart next time
        return combine(proj, self.backend, results, steps, warmup, cuda_graph)

    def _get(self, deadline: float, doing: str) -> tuple:
        """The next message from the workers; raises if one died or time ran out."""
        w = self._workers
        assert w is not None
        while True:
            msg = w.next(0.2)
            if msg is not None:
                self._check_lost(msg)
                return msg
            dead = w.exited()
            if dead is not None:
                self.close(kill=True)
                raise BackendError(f"the worker of rank {dead[0]} died while {doing} "
                                   f"({dead[1]}); its output above may say why")
            if time.monotonic() > deadline:
                self.close(kill=True)
                raise BackendError(f"timed out after {self.start_timeout_s:g} s {doing}")

    def _check_lost(self, msg: tuple) -> None:
        if msg[0] == "lost":
            self.close(kill=True)
            raise BackendError(f"a reply from the worker of rank {msg[1]} could not be read "
                               f"({msg[2]}); the workers were stopped")

    def _collect(self, proj: Projection, w: LocalWorkers, cuda_graph: bool = False,
                 ) -> list[RankResult]:
        results: dict[int, RankResult] = {}
        beats = self._beats(w)
        last_change = time.monotonic()
        while len(results) < self.world_size:
            msg = w.next(0.2)
            if msg is not None:
                self._check_lost(msg)
                if msg[0] == "result":
                    results[msg[1]] = msg[2]
                    last_change = time.monotonic()
                continue
            dead = w.exited(ignore=set(results))
            if dead is not None:
                where = self._where(proj, w)
                self.close(kill=True)
                raise BackendError(f"the worker of rank {dead[0]} died while running "
                                   f"@{proj.name} ({dead[1]}); {where}")
            now = time.monotonic()
            b = self._beats(w)
            if b != beats:
                beats, last_change = b, now
            elif now - last_change > self.watchdog_s:
                where = self._where(proj, w)
                if cuda_graph:  # the ranks' host code ran during the capture alone
                    where = (f"{where} in the capture (replays of a CUDA graph report no "
                             "position)")
                self.close(kill=True)
                raise BackendError(
                    f"@{proj.name} hung: no rank made progress for {self.watchdog_s:g} s; "
                    f"{where}; a collective whose participants never all joined, or a step "
                    "longer than the timeout (raise timeout_s)")
        return [results[r] for r in range(self.world_size)]

    def _beats(self, w: LocalWorkers) -> tuple[int, ...]:
        p = w.progress
        return tuple(p[3 * r + 2] for r in range(self.world_size))

    def _where(self, proj: Projection, w: LocalWorkers) -> str:
        """Where each rank is, from the progress slots: the communication it is in."""
        kinds: dict[int, str] = {}
        for prog in proj.programs:
            for op in prog.fn.ops:
                attrs: dict[str, Any] = op.attrs
                if "seq" in attrs:
                    kind = "Send" if op.op_type == "Recv" else op.op_type
                    kinds[int(attrs["seq"])] = f"{kind} over devices {list(attrs['group'])}"
        parts = []
        p = w.progress
        for r in range(self.world_size):
            seq, state = p[3 * r], p[3 * r + 1]
            if seq < 0:
                parts.append(f"rank {r} has not communicated yet")
            elif state == 2:
                parts.append(f"rank {r} waits in communication {seq} ({kinds.get(seq, '?')})")
            else:
                parts.append(f"rank {r} is past communication {seq}")
        return ", ".join(parts)


class TorchrunSession:
    """This process's rank of a ``torchrun`` launch (``env://`` rendezvous): the process
    group is set up once, and every ``run`` returns the combined result on rank 0 and
    ``None`` on the other ranks."""

    def __init__(self, backend: str | None = None, *, timeout_s: float = 300.0) -> None:
        import datetime

        import torch
        import torch.distributed as dist

        from distir.backend.worker import RankRunner

        if not in_torchrun():
            raise ConfigError("not started by torchrun: RANK, WORLD_SIZE and LOCAL_RANK must "
                              "be set")
        self.rank = int(os.environ["RANK"])
        self.world_size = int(os.environ["WORLD_SIZE"])
        local = int(os.environ["LOCAL_RANK"])
        n_local = int(os.environ.get("LOCAL_WORLD_SIZE", local + 1))
        self.backend = resolve_backend(backend, self.world_size, local_devices=n_local)
        if self.backend == "nccl":
            torch.cuda.set_device(local)
            device = torch.device("cuda", local)
        else:
            device = torch.device("cpu")
        self.owns_group = not dist.is_initialized()
        if self.owns_group:
            from distir.backend.procs import graph_env

            os.environ.update(graph_env(os.environ))  # read by NCCL as it starts
            kw: dict[str, Any] = {"device_id": device} if self.backend == "nccl" else {}
            dist.init_process_group(self.backend, init_method="env://",
                                    timeout=datetime.timedelta(seconds=timeout_s), **kw)
        self.runner = RankRunner(self.rank, self.world_size, self.backend, device, timeout_s)

    def run(self, fn: Function | Module | Projection, inputs: Sequence[Any] | None = None, *,
            steps: int = 10, warmup: int = 3, outputs: bool | None = None,
            memory_limit: int | None = None, seed: int = 0,
            profile: str | None = None, profile_marks: bool = True,
            cuda_graph: bool = False, host_cost: bool = False) -> RunResult | None:
        import torch.distributed as dist

        proj, args = prepare(fn, self.world_size, inputs)
        want = inputs is not None if outputs is None else outputs
        tasks = make_tasks(proj, args, steps=steps, warmup=warmup, want_outputs=want,
                           memory_limit=memory_limit, seed=seed, profile=profile,
                           profile_marks=profile_marks, cuda_graph=cuda_graph,
                           host_cost=host_cost)
        res = self.runner.run(tasks[self.rank])
        gathered: list[Any] | None = [None] * self.world_size if self.rank == 0 else None
        dist.gather_object(res, gathered, dst=0)
        if self.rank != 0:
            return None
        return combine(proj, self.backend, gathered or [], steps, warmup, cuda_graph)

    def compile(self, fn: Function | Module | Projection, *,
                memory_limit: int | None = None) -> tuple[RankTask, Any]:
        """This rank's task for ``fn`` and its ``CompiledProgram``, its process groups made
        (every rank calls it, in the same order), for tools that drive the compiled program
        themselves (``calibration.bench_dispatch``, ``calibration.memory_trace``).
        ``memory_limit`` caps the allocator on a GPU, the live bytes by types elsewhere."""
        from distir.backend.lowering import compile_program, known_inputs

        proj, args = prepare(fn, self.world_size, None)
        task = make_tasks(proj, args, steps=1, warmup=0, want_outputs=False,
                          memory_limit=memory_limit, seed=0)[self.rank]
        self.runner.groups.ensure(task.groups)
        return task, compile_program(task.program, self.runner.device, rank=self.rank,
                                     groups=self.runner.groups,
                                     memory_limit=self.runner.memory_cap(task),
                                     known=known_inputs(task.inputs))

    def gather(self, rows: list[Any]) -> list[Any] | None:
        """Every rank's ``rows``, concatenated in rank order, on rank 0; ``None`` on the
        others."""
        import torch.distributed as dist

        parts: list[Any] | None = [None] * self.world_size if self.rank == 0 else None
        dist.gather_object(rows, parts, dst=0)
        return None if parts is None else [r for part in parts for r in part]

    def close(self) -> None:
        """Leave the process group, if this session set it up."""
        import torch.distributed as dist

        if self.owns_group and dist.is_initialized():
            dist.destroy_process_group()
        self.owns_group = False
