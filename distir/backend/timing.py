"""Measurement: step timers, per-rank results and the combined result of a run.

A run is ``warmup`` untimed steps, then ``steps`` timed ones. Before every step all ranks
meet at a barrier (a one-element all-reduce that also carries each rank's status, so a
failure anywhere stops every rank at the same step). A step's time on a rank runs from the
barrier to the end of its program: CUDA events on the rank's stream on a GPU (the end
event is waited for before the next barrier), ``time.perf_counter`` on the CPU. The step
latency is the slowest rank's time, and the reported latency is the median over the
timed steps. Peak memory is ``torch.cuda.max_memory_allocated`` over the steps (its
counter is reset once the inputs are in place, so it counts the inputs and the most that
any step adds). All times are seconds, all sizes bytes.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["RankResult", "RunResult", "StepTimer", "OK", "OOM", "ERROR", "COMM_ERROR",
           "HOST_BOUND"]

OK, OOM, ERROR, COMM_ERROR = 0, 1, 2, 3
"""Rank status codes, ordered by severity (the barrier takes their maximum)."""
STATUS_NAMES = {OK: "ok", OOM: "oom", ERROR: "error", COMM_ERROR: "error"}


class StepTimer:
    """Times one step on one rank: CUDA events on a GPU, ``perf_counter`` otherwise."""

    def __init__(self, device: Any) -> None:
        self.cuda = getattr(device, "type", str(device)).startswith("cuda")
        if self.cuda:
            import torch

            self._start = torch.cuda.Event(enable_timing=True)
            self._end = torch.cuda.Event(enable_timing=True)
        self._t0 = 0.0
        self._t1 = 0.0

    def start(self) -> None:
        if self.cuda:
            self._start.record()
        else:
            self._t0 = time.perf_counter()

    def stop(self) -> float:
        """End the step (waiting for the device) and return its duration in seconds."""
        if self.cuda:
            self._end.record()
            self._end.synchronize()
            return self._start.elapsed_time(self._end) / 1e3
        self._t1 = time.perf_counter()
        return self._t1 - self._t0


HOST_BOUND = 0.8
"""``RunResult.host_share`` from which a step counts as paced by its hosts."""


@dataclass(slots=True)
class RankResult:
    """What one rank reports for one program."""

    rank: int
    status: int = OK
    message: str = ""
    error_type: str = ""
    times_s: list[float] = field(default_factory=list)
    peak_memory_bytes: int | None = None
    static_peak_bytes: int = 0
    outputs: list[Any] | None = None
    device_name: str = ""
    host_cost_s: float | None = None
    nonfinite: int = 0
    """How many of the last step's floating-point results hold a NaN."""


@dataclass(slots=True)
class RunResult:
    """The measured run of one program over ``world_size`` ranks.

    ``status`` is ``"ok"`` or ``"oom"`` (a rank ran out of memory: ``oom_ranks`` and
    ``message`` say where; there are then no times). ``rank_times_s[r][k]`` is rank r's time
    in timed step k; ``step_times_s[k]`` the slowest rank's. ``peak_memory_bytes[r]`` is
    rank r's CUDA peak (``None`` on the CPU); ``static_peak_bytes[r]`` the most bytes its
    program's types say are live at once. ``outputs`` holds the function's results as
    numpy arrays, in order, when they were asked for. ``host_cost_s[r]``, where the run
    asked for it (``host_cost``), is rank r's host cost of one step: its ops issued to an
    idle device, summed (``lowering.isolated``); ``host_share`` compares the busiest
    rank's with the step. ``nonfinite[r]`` counts rank r's floating-point results of the
    last step that hold a NaN: a step that computes on NaN is not the step training runs
    (some kernels, Adam's among them, run NaN at other speeds), so its time is not one to
    report (``summary`` says so). Infinities alone are not counted (a step may return a
    mask of ``-inf``).
    """

    name: str
    backend: str
    world_size: int
    steps: int
    warmup: int
    status: str = "ok"
    message: str = ""
    oom_ranks: list[int] = field(default_factory=list)
    rank_times_s: list[list[float]] = field(default_factory=list)
    peak_memory_bytes: list[int | None] = field(default_factory=list)
    static_peak_bytes: list[int] = field(default_factory=list)
    outputs: list[Any] | None = None
    device_name: str = ""
    cuda_graph: bool = False
    """Whether each step was a replay of a CUDA graph (``warmup`` is then the untimed steps
    run: at least 3, the capture among them)."""
    host_cost_s: list[float | None] = field(default_factory=list)
    nonfinite: list[int] = field(default_factory=list)

    @property
    def busiest_host_cost_s(self) -> float | None:
        """The largest ``host_cost_s`` of the ranks (``None`` where none was measured)."""
        return max((c for c in self.host_cost_s if c is not None), default=None)

    @property
    def host_share(self) -> float | None:
        """The busiest host's own cost of a step over the step's latency (``None`` without
        both). Near 1 (``HOST_BOUND``, 0.8, and above) the step is paced by its hosts: its
        time is the host's speed, which differs between machines of one kind and between
        launches, not the GPUs' (docs/fidelity.md)."""
        cost, lat = self.busiest_host_cost_s, self.step_latency_s
        return cost / lat if cost is not None and lat else None

    @property
    def step_times_s(self) -> list[float]:
        if not self.rank_times_s or not all(self.rank_times_s):
            return []
        return [max(ts) for ts in zip(*self.rank_times_s)]

    @property
    def step_latency_s(self) -> float | None:
        """The median over timed steps of the slowest rank's time; ``None`` without times."""
        st = self.step_times_s
        return statistics.median(st) if st else None

    @property
    def rank_latency_s(self) -> list[float | None]:
        """Each rank's median step time."""
        return [statistics.median(ts) if ts else None for ts in self.rank_times_s]

    @property
    def throughput(self) -> float | None:
        """Steps per second (multiply by the global batch for samples per second)."""
        lat = self.step_latency_s
        return 1.0 / lat if lat else None

    def samples_per_s(self, batch_size: int) -> float | None:
        lat = self.step_latency_s
        return batch_size / lat if lat else None

    @property
    def max_peak_memory_bytes(self) -> int | None:
        vals = [p for p in self.peak_memory_bytes if p is not None]
        return max(vals) if vals else None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (outputs as shapes only)."""
        return {
            "name": self.name, "backend": self.backend, "world_size": self.world_size,
            "device": self.device_name, "cuda_graph": self.cuda_graph,
            "status": self.status, "message": self.message,
            "oom_ranks": self.oom_ranks, "steps": self.steps, "warmup": self.warmup,
            "step_latency_s": self.step_latency_s, "throughput_steps_per_s": self.throughput,
            "step_times_s": self.step_times_s, "rank_latency_s": self.rank_latency_s,
            "rank_times_s": self.rank_times_s, "peak_memory_bytes": self.peak_memory_bytes,
            "static_peak_bytes": self.static_peak_bytes,
            "host_cost_s": self.host_cost_s, "host_share": self.host_share,
            "nonfinite": self.nonfinite,
            "outputs": None if self.outputs is None else [
                {"shape": list(getattr(o, "shape", ())), "dtype": str(getattr(o, "dtype", ""))}
                for o in self.outputs],
        }

    def summary(self) -> str:
        """A few human-readable lines."""
        lines = [f"{self.name}: {self.world_size} rank(s), {self.backend}"
                 + (f" on {self.device_name}" if self.device_name else "")]
        if self.status != "ok":
            lines.append(f"  {self.status}: {self.message}")
            return "\n".join(lines)
        lat = self.step_latency_s
        lines.append(f"  step latency {_ms(lat)} (median of {self.steps} "
                     + ("CUDA graph replays" if self.cuda_graph else "steps")
                     + f" after {self.warmup} warm-up; slowest rank per step)")
        lines.append("  per rank: " + ", ".join(f"{r}: {_ms(t)}"
                                                for r, t in enumerate(self.rank_latency_s)))
        if any(p is not None for p in self.peak_memory_bytes):
            lines.append("  peak memory: " + ", ".join(
                f"{r}: {_mib(p)}" for r, p in enumerate(self.peak_memory_bytes)))
        lines.append("  live bytes by types: " + ", ".join(
            f"{r}: {_mib(p)}" for r, p in enumerate(self.static_peak_bytes)))
        if any(self.nonfinite):
            lines.append(f"  warning: {sum(self.nonfinite)} result(s) of the step hold NaN "
                         "(per rank: " + ", ".join(
                             f"{r}: {n}" for r, n in enumerate(self.nonfinite))
                         + "): the step computes on values training never has, and its time "
                         "may not be training's; give the model's weights (an initializer "
                         "per weight, or --inputs)")
        share = self.host_share
        if share is not None:
            lines.append("  host's own cost per step: " + ", ".join(
                f"{r}: {_ms(c)}" for r, c in enumerate(self.host_cost_s))
                + f" ({share:.0%} of the step" + ("; paced by the host: run it as a CUDA "
                                                   "graph to time the GPUs" if share >= HOST_BOUND
                                                   else "") + ")")
        return "\n".join(lines)


def _ms(t: float | None) -> str:
    return "n/a" if t is None else f"{t * 1e3:.3f} ms"


def _mib(b: int | None) -> str:
    return "n/a" if b is None else f"{b / 2**20:.1f} MiB"
