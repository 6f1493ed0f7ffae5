"""The rank side of a run: compile the rank's program, bind its inputs, time its steps.

``RankRunner`` holds what a rank keeps between programs (its device, its process groups);
``RankRunner.run(task)`` runs one program and returns a ``RankResult``. It is used by the
local workers (``distir.backend.worker_process``, fresh interpreters started by
``distir.backend.launch.Session``, which receive their programs as DistIR text) and by
``torchrun`` processes (which project the program themselves) alike.

Failure protocol: every rank reports its status at each barrier (``agree``), so when one
rank fails (out of memory, an error in an op) all ranks stop at the same step. A rank that
fails in the middle of a step runs the rest of its communication on dummy buffers first
(``CompiledProgram.drain``), so its peers are never left waiting in a collective.
"""

from __future__ import annotations

import gc
import re
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from distir.analysis.projection import RankProgram
from distir.analysis.state import state_roles
from distir.backend.timing import COMM_ERROR, ERROR, OK, OOM, RankResult, StepTimer
from distir.errors import BackendError, DistIRError

__all__ = ["RankTask", "RankRunner", "describe", "to_torch", "to_numpy", "random_tensor",
           "draw_inputs", "Filled"]


@dataclass(slots=True)
class RankTask:
    """One program for one rank. ``inputs`` are the rank's parameters in program order; a
    ``None`` (or ``inputs=None``) stands for a random one of the declared type, drawn on the
    device from ``seed`` (``draw_inputs``: an optimizer's state as a training step holds
    it)."""

    name: str
    program: RankProgram
    groups: tuple[tuple[int, ...], ...]
    inputs: list[np.ndarray | None] | None
    steps: int
    warmup: int
    want_outputs: bool
    memory_limit: int | None = None
    seed: int = 0
    profile: str | None = None
    """A directory: after the timed steps, one more step runs with its ops marked under
    ``torch.profiler``, its trace written to ``profile/rank{r}.json``
    (``distir.backend.profiling``); the timed steps are not profiled."""
    profile_marks: bool = True
    """Whether the profiled step's ops are marked (``False``: on a GPU, its kernels, copies
    and CUDA runtime calls only, the host's ops not recorded)."""
    cuda_graph: bool = False
    """Capture the step once as a CUDA graph and time its replays: the host then issues one
    graph launch per step instead of one call per op. The warm-up is then at least three
    steps (eager, the capture, a replay). GPU only; a program that cannot be captured
    fails in one line."""
    host_cost: bool = False
    """After the timed steps (eager ones on a GPU only), one more step that synchronises
    the device after every op, timing each op's call on the host: the sum is the host's own
    cost of a step (``lowering.isolated``), reported as ``RankResult.host_cost_s``."""


@dataclass(frozen=True, slots=True)
class Filled:
    """An input every element of which is ``value`` (a numpy scalar), as it travels to a
    worker (``distir.backend.wire.task_message``): an optimizer's zero moments, a norm's
    weight of ones, sent as one number rather than gigabytes, and made on the device."""

    value: Any
    shape: tuple[int, ...]


def to_torch(a: np.ndarray | Filled, device: Any) -> Any:
    """A numpy array (or a ``Filled`` one) as a tensor on ``device`` (bfloat16 through its
    bits)."""
    import torch

    if isinstance(a, Filled):
        one = to_torch(np.asarray(a.value), device)
        return one.expand(a.shape).clone(memory_format=torch.contiguous_format)
    arr = np.asarray(a, order="C")  # (np.ascontiguousarray would make a 0-d array 1-d)
    if arr.dtype.name == "bfloat16":
        return torch.from_numpy(arr.view(np.int16).copy()).view(torch.bfloat16).to(device)
    return torch.from_numpy(arr.copy() if not arr.flags.writeable else arr).to(device)


def to_numpy(t: Any) -> np.ndarray:
    """A tensor as a numpy array on the host (bfloat16 as ``ml_dtypes.bfloat16``)."""
    import torch

    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def random_tensor(t: Any, device: Any, gen: Any, role: str | None = None) -> Any:
    """A random tensor of type ``t``: normal floats (a matrix scaled by one over the square
    root of its row count, so that deep products of weights stay finite in half precision),
    integers in [0, 8), random booleans. ``role`` (``distir.analysis.state.state_roles``)
    draws an optimizer's state as a training step holds it: ``"square"`` the squares of
    normal floats (Adam's second moments), ``"count"`` ones (its step count, the first
    step)."""
    import torch

    from distir.backend.lowering import as_tensor_type, torch_dtype

    tt = as_tensor_type(t)
    dt = torch_dtype(tt.dtype)
    if role == "count":
        return torch.ones(tt.shape, dtype=dt, device=device)
    if tt.dtype.is_float:
        x = torch.randn(tt.shape, dtype=dt, device=device, generator=gen)
        if role == "square":
            return x.mul_(x)
        return x.mul_(tt.shape[-2] ** -0.5) if tt.rank >= 2 and tt.shape[-2] > 1 else x
    hi = 2 if dt == torch.bool else 8
    return torch.randint(0, hi, tt.shape, device=device, generator=gen).to(dt)


def draw_inputs(fn: Any, device: Any, gen: Any, given: Any = None) -> list[Any]:
    """``fn``'s parameters as tensors on ``device``: ``given[i]`` where it is not ``None``,
    else drawn by ``random_tensor`` (optimizer state as a training step holds it)."""
    params = fn.params
    roles = state_roles(fn)
    given = given if given is not None else [None] * len(params)
    return [random_tensor(p.type, device, gen, roles.get(i)) if a is None else
            to_torch(a, device) for i, (p, a) in enumerate(zip(params, given))]


class RankRunner:
    """One rank's state across programs: device, process groups, progress slots."""

    def __init__(self, rank: int, world_size: int, backend: str, device: Any,
                 timeout_s: float, progress: Any = None) -> None:
        from distir.backend.groups import GroupCache

        self.rank = rank
        self.world_size = world_size
        self.backend = backend
        self.device = device
        self.progress = progress
        self.groups = GroupCache(rank, world_size, device, timeout_s)
        self.device_name = _device_name(device)

    def beat(self) -> None:
        if self.progress is not None:
            self.progress[3 * self.rank + 2] += 1

    def agree(self, status: int) -> int:
        """Barrier of all ranks; returns the worst status any rank brought."""
        import torch
        import torch.distributed as dist

        flag = torch.tensor([status], dtype=torch.int32, device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        self.beat()
        return int(flag.item())

    def run(self, task: RankTask) -> RankResult:
        """Run one program; never raises for a failure the other ranks must hear about.
        The result's status is this rank's own (``OK`` when another rank failed)."""
        import torch

        from distir.backend.lowering import compile_program, is_oom, known_inputs

        res = RankResult(self.rank, device_name=self.device_name)
        mine, compiled, inputs = OK, None, None
        try:
            self.groups.ensure(task.groups)
            compiled = compile_program(task.program, self.device, rank=self.rank,
                                       groups=self.groups, memory_limit=self.memory_cap(task),
                                       progress=self.progress,
                                       known=known_inputs(task.inputs))
            res.static_peak_bytes = compiled.static_peak_bytes
            inputs = self.bind(task)
        except Exception as e:  # noqa: BLE001 - reported to the caller, with its kind
            mine, res.message = (OOM if is_oom(e) else ERROR), describe(e)
            res.error_type = type(e).__name__
        is_cuda = self.device.type == "cuda"
        if task.cuda_graph and not is_cuda and mine == OK:
            mine, res.error_type = ERROR, "ConfigError"
            res.message = (f"CUDA graphs need a GPU, and rank {self.rank} runs on "
                           f"{self.device_name}: run without --cuda-graph (cuda_graph=False)")
        graph: Any = None
        outs: list[Any] | None = None
        graph_outs: list[Any] | None = None
        try:
            # Every rank meets the same barriers (one before the first step, one after
            # each), and they all carry the same verdict, so all ranks leave together.
            agreed = self.agree(mine)
            if is_cuda:
                torch.cuda.reset_peak_memory_stats(self.device)
            timer = StepTimer(self.device)
            # With a CUDA graph, the warm-up is at least one eager step (which connects the
            # communicators' peers: NCCL cannot while capturing), then a step that captures
            # the graph and runs nothing, then at least one untimed replay. The barrier after
            # the capture step keeps every rank from replaying before all have captured (a
            # peer still capturing may need this rank's GPU, which a replay would hold in
            # its first collective; replays hung at random on 4 x H200 while ranks replayed
            # right after their own capture: grid_search/results/cuda_graph_4gpu).
            warmup = max(task.warmup, 3) if task.cuda_graph else task.warmup
            capture_at = warmup - 2 if task.cuda_graph and mine == OK else -1
            timed = warmup + task.steps
            # The host's own cost (eager steps on a GPU; on the CPU the ops' cost is the
            # whole step): one step with the device synchronised after every op, after the
            # timed ones.
            host_at = timed if task.host_cost and is_cuda and not task.cuda_graph else -1
            # Profiling adds two steps: the profiler's own warm-up, then the recorded one.
            total, step = timed + (host_at >= 0) + 2 * (task.profile is not None), 0
            prof: Any = None
            while agreed == OK and step < total:
                outs = graph_outs  # the previous step's results are not kept (a graph's are
                # its own tensors, rewritten by each replay)
                prog = compiled if step <= max(timed - 1, host_at) or not task.profile_marks \
                    or graph is not None else _marked(compiled)
                try:
                    if step == capture_at:
                        graph, graph_outs = self.capture(
                            compiled, inputs,  # type: ignore[arg-type]
                            profiled=task.profile is not None)
                    elif step < timed:
                        timer.start()
                        if graph is not None:
                            graph.replay()
                        else:
                            with torch.inference_mode():
                                outs = prog.run(inputs)  # type: ignore[union-attr, arg-type]
                        dt = timer.stop()
                        if step >= warmup:
                            res.times_s.append(dt)
                        if step == timed - 1:  # (after the timer: no step's time holds it)
                            res.nonfinite = _nonfinite(graph_outs if graph is not None
                                                       else outs)
                    elif step == host_at:
                        try:
                            res.host_cost_s, outs = self.host_cost(
                                compiled, inputs)  # type: ignore[arg-type]
                        except Exception as e:  # noqa: BLE001
                            if is_oom(e) or _comm_failure(e):
                                raise  # a broken group or a full card: said as for any step
                            # Otherwise the timed steps stand; the host cost stays unknown.
                    else:
                        prof = self.profile_step(task, prog, inputs, timer, prof,
                                                 last=step == total - 1, graph=graph)
                except Exception as e:  # noqa: BLE001
                    if isinstance(e, _CaptureError):
                        # Nothing ran, but the peers captured collectives this rank did
                        # not: the session starts fresh process groups for what follows.
                        mine, res.message, res.error_type = COMM_ERROR, e.message, \
                            "BackendError"
                    else:
                        mine = OOM if is_oom(e) else \
                            (COMM_ERROR if _comm_failure(e) else ERROR)
                        res.message = describe(e, step, prog.failed_at)  # type: ignore[union-attr]
                        res.error_type = type(e).__name__
                self.beat()
                step += 1
                agreed = self.agree(mine)
            if is_cuda:
                res.peak_memory_bytes = int(torch.cuda.max_memory_allocated(self.device))
            if agreed == OK and task.want_outputs and outs is not None:
                res.outputs = [to_numpy(o) for o in outs]
        except Exception as e:  # noqa: BLE001 - the barrier itself failed: a broken group
            mine = COMM_ERROR
            res.message = res.message or describe(e)
        res.status = mine
        del compiled, inputs, graph, outs, graph_outs  # the graph's pool is freed with it
        gc.collect()
        if is_cuda:
            torch.cuda.empty_cache()
            if task.memory_limit is not None:  # the cap was this program's only
                torch.cuda.set_per_process_memory_fraction(1.0, self.device)
        return res

    def host_cost(self, compiled: Any, inputs: list[Any]) -> tuple[float, list[Any]]:
        """One step with the device synchronised after every op: the host seconds its ops'
        calls took, summed (``lowering.isolated``), and the step's results."""
        import torch

        from distir.backend.lowering import isolated, synchronizer

        sync = synchronizer(self.device)
        prog, times = isolated(compiled, sync)
        sync()
        try:
            with torch.inference_mode():
                outs = prog.run(inputs)
        finally:
            compiled.failed_at = prog.failed_at  # (the copy's failure, named as for any step)
        sync()
        return sum(times), outs

    def capture(self, compiled: Any, inputs: list[Any], profiled: bool = False,
                ) -> tuple[Any, list[Any]]:
        """Capture one step of ``compiled`` as a CUDA graph (its collectives included; nothing
        runs); returns the graph and its output tensors, which every replay overwrites. The
        graph allocates from a pool of its own, kept until it is freed."""
        import torch

        torch.cuda.synchronize(self.device)
        # The eager steps' cached blocks back to the driver: the graph allocates from a
        # pool of its own, which could not reuse them (near the card's capacity, the two
        # together would not fit where the step alone does).
        torch.cuda.empty_cache()
        if profiled:  # the profiler (CUPTI) set up before the capture, not during a replay
            try:
                from torch.profiler._utils import _init_for_cuda_graphs
            except ImportError:
                pass
            else:
                _init_for_cuda_graphs()
        graph = torch.cuda.CUDAGraph()
        try:
            # Thread-local capture: the NCCL watchdog thread may still query the events of
            # the eager steps before it, which global capture would turn into an error.
            with torch.inference_mode(), torch.cuda.graph(graph,
                                                          capture_error_mode="thread_local"):
                outs = compiled.run(inputs)
        except Exception as e:  # noqa: BLE001 - said in one line, with the op
            from distir.backend.lowering import is_oom

            if is_oom(e):
                raise
            at = f" at {compiled.failed_at}" if compiled.failed_at else ""
            raise _CaptureError(
                f"the step cannot be captured as a CUDA graph{at}: {describe(e)}; run "
                "without --cuda-graph (cuda_graph=False)") from e
        return graph, outs

    def profile_step(self, task: RankTask, prog: Any, inputs: Any, timer: StepTimer,
                     prof: Any, *, last: bool, graph: Any = None) -> Any:
        """One step of the marked program under ``torch.profiler`` (started at the first such
        step, which is its warm-up and is not recorded); the last writes the trace. ``prof``
        is what the previous call returned (``None`` at first)."""
        import torch
        from torch.profiler import ProfilerActivity, profile, schedule

        from distir.backend.profiling import write_trace

        if prof is None:
            fn = task.program.fn
            info: dict[str, Any] = {
                "rank": self.rank, "world_size": self.world_size, "program": task.name,
                "num_ops": len(fn.ops), "op_types": [op.op_type for op in fn.ops],
                "device": self.device_name, "backend": self.backend}
            # Without marks on a GPU, the device's activity alone (kernels, copies, CUDA
            # runtime calls): recording every aten op on the host would slow a host-bound
            # step down as the marks do.
            cuda = self.device.type == "cuda"
            acts = [ProfilerActivity.CPU] if task.profile_marks or not cuda else []
            if cuda:
                acts.append(ProfilerActivity.CUDA)
            with warnings.catch_warnings():  # (that a new cycle would clear its events)
                warnings.simplefilter("ignore", UserWarning)
                prof = profile(activities=acts, schedule=schedule(wait=0, warmup=1, active=1),
                               on_trace_ready=lambda p: write_trace(p, str(task.profile),
                                                                    self.rank, info))
                prof.start()
            prof = (prof, info)
        timer.start()
        if graph is not None:  # a graph's kernels, without marks: its host issues one launch
            graph.replay()
        else:
            with torch.inference_mode():
                prog.run(inputs)
        prof[1]["step_s"] = timer.stop()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            prof[0].step()  # after the recorded step: the trace is written
        if last:
            prof[0].stop()
            return None
        return prof

    def refuse(self, message: str, error_type: str) -> RankResult:
        """The result for a task this rank could not even read: it still meets the other
        ranks at their first barrier, carrying its error, so they stop there too."""
        res = RankResult(self.rank, status=ERROR, message=message, error_type=error_type,
                         device_name=self.device_name)
        try:
            self.agree(ERROR)
        except Exception:  # noqa: BLE001 - the barrier itself failed: a broken group
            res.status = COMM_ERROR
        return res

    def memory_cap(self, task: RankTask) -> int | None:
        """The limit checked against live bytes by types: only where no allocator cap is
        set (the CPU); on a GPU the allocator enforces ``memory_limit`` itself."""
        if task.memory_limit is None:
            return None
        if self.device.type == "cuda":
            import torch

            total = torch.cuda.get_device_properties(self.device).total_memory
            torch.cuda.set_per_process_memory_fraction(min(1.0, task.memory_limit / total),
                                                       self.device)
            return None
        return task.memory_limit

    def bind(self, task: RankTask) -> list[Any]:
        import torch

        gen = torch.Generator(device=self.device)
        gen.manual_seed(task.seed * 1_000_003 + self.rank)
        return draw_inputs(task.program.fn, self.device, gen, task.inputs)


def _nonfinite(outs: list[Any] | None) -> int:
    """How many of ``outs`` (a step's results) are floating-point tensors holding a NaN: one
    ``amax`` a tensor (it propagates NaN, and allocates no tensor of the result's size, so
    that the check moves no measured peak), one device synchronisation."""
    import torch

    if not outs:
        return 0
    maxima = [torch.amax(o).float() for o in outs
              if isinstance(o, torch.Tensor) and o.is_floating_point() and o.numel()]
    if not maxima:
        return 0
    return int(torch.isnan(torch.stack(maxima)).sum().item())


_SOURCE_PLACE = re.compile(r"\[[^\]]*\.(?:cc|cpp|h|hpp):\d+\]\s*")


def describe(e: BaseException, step: int | None = None, op: str | None = None) -> str:
    """One line: where (the op and step, when known), then the error."""
    where = ", ".join(x for x in (f"at {op}" if op else "",
                                  f"step {step}" if step is not None else "") if x)
    where = f"{where}: " if where else ""
    if isinstance(e, DistIRError):
        return where + e.message
    msg = _SOURCE_PLACE.sub("", " ".join(str(e).split()))
    if len(msg) > 300:
        msg = msg[:300] + "..."
    return f"{where}{type(e).__name__}: {msg}"


class _CaptureError(BackendError):
    """A step that could not be captured as a CUDA graph; ``message`` says why, in one line."""


def _comm_failure(e: BaseException) -> bool:
    """Whether ``e`` came from a collective (timeouts, closed connections): the process
    groups may then be broken."""
    text = f"{type(e).__name__} {e}".lower()
    return any(k in text for k in ("timed out", "timeout", "connection", "nccl", "gloo",
                                   "distbackenderror", "peer"))


def _marked(compiled: Any) -> Any:
    from distir.backend.profiling import marked

    return marked(compiled)


def _device_name(device: Any) -> str:
    if getattr(device, "type", "") == "cuda":
        import torch

        return str(torch.cuda.get_device_name(device))
    import platform

    return f"cpu ({platform.machine()})"
