"""The PyTorch backend: run a distributed program for real and measure it.

``distir.run(fn)`` projects ``fn`` to one program per device
(``distir.analysis.projection``), lowers each op to PyTorch (``LOWERINGS``), starts one
process per device (NCCL on GPUs, gloo on the CPU) and times the step. A ``Session`` keeps
the processes and their communicators across programs; under ``torchrun`` the run happens
in place, one rank per process. ``torch`` is imported only when a run starts.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from distir.backend.launch import Session, TorchrunSession, in_torchrun
from distir.backend.timing import RunResult

__all__ = ["run", "Session", "TorchrunSession", "RunResult"]


def run(fn: Any, inputs: Sequence[Any] | None = None, *, backend: str | None = None,
        steps: int = 10, warmup: int = 3, world_size: int | None = None,
        outputs: bool | None = None, memory_limit: int | None = None, seed: int = 0,
        timeout_s: float = 300.0, profile: str | None = None,
        cuda_graph: bool = False, host_cost: bool = False) -> RunResult | None:
    """Run ``fn`` (a ``Function``, a ``Module``'s entry, or a ``Projection``) for real.

    One process per device of the program (``world_size`` may ask for more; the extra
    ranks have nothing to do), ``backend`` ``"nccl"`` or ``"gloo"`` (default: NCCL when
    there is a GPU per process). ``warmup`` untimed steps, then ``steps`` timed ones.
    ``inputs`` are the entry's arguments as numpy arrays; without them, random inputs of
    the declared types are drawn on each device. ``outputs`` (default: whether inputs were
    given) brings the results back as numpy arrays, in order, in ``result.outputs``.

    Returns a ``RunResult`` (``step_latency_s``, ``rank_times_s``, ``peak_memory_bytes``,
    ``status`` ``"ok"`` or ``"oom"``, ...). Under ``torchrun`` every process calls this, rank
    0 gets the result and the others ``None``. Raises a one-line ``DistIRError`` for an op
    without a lowering, a failed op, a hung collective (after ``timeout_s``) or a dead
    worker; every worker process is stopped whatever happens. ``profile`` (a directory)
    adds one untimed step, profiled with ``torch.profiler`` and every op marked, and writes
    each rank's trace to ``profile/rank{r}.json`` (see ``distir explain``). ``cuda_graph``
    captures each rank's step as a CUDA graph after the eager warm-up steps and times its
    replays (GPU only): the host then launches one graph a step instead of every op, as
    small, host-bound steps are run in production; a step that cannot be captured (an op
    that reads a value back to the host) fails in one line. Its profiled step records the
    graph's kernels, without per-op marks. ``host_cost`` (eager steps on GPUs) adds one
    step after the timed ones, the device synchronised after every op, to measure each
    rank's host cost of a step: ``result.host_cost_s``, and ``result.host_share``, the
    busiest host's over the step (from ``HOST_BOUND``, 0.8, the step is paced by its
    hosts).
    """
    from distir.backend.launch import prepare

    kw = dict(steps=steps, warmup=warmup, memory_limit=memory_limit, seed=seed,
              profile=None if profile is None else os.path.abspath(profile),
              cuda_graph=cuda_graph, host_cost=host_cost)
    if in_torchrun():
        ts = TorchrunSession(backend, timeout_s=timeout_s)
        try:
            return ts.run(fn, inputs, outputs=outputs, **kw)  # type: ignore[arg-type]
        finally:
            ts.close()
    proj, args = prepare(fn, world_size, inputs)
    want = inputs is not None if outputs is None else outputs
    with Session(proj.world_size, backend, timeout_s=timeout_s) as s:
        return s.run_prepared(proj, args, outputs=want, **kw)  # type: ignore[arg-type]
