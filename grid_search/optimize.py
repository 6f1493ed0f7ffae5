"""``distir optimize``: the per-op search (``distir.optimize``) on a workload, and its report.

The search itself lives in ``distir.transforms.spmd.optimize``; this module builds the
workload's sequential step (a preset, a family with sizes, or a model file, as for
``distir grid-search``), runs the search, and formats the plans it simulated.
"""

from __future__ import annotations

from typing import Any

from distir.errors import ConfigError
from grid_search.models import Workload, default_batches

__all__ = ["optimize_workload", "report"]


def optimize_workload(w: Workload, devices: int, *, hardware: str = "h100-sxm",
                      batch_size: int | None = None, budget_s: float | None = None,
                      **kw: Any) -> tuple[Any, int]:
    """``(OptimizeResult, batch size)`` of ``w``'s step at ``batch_size`` (default: the
    workload's first default batch) over ``devices`` devices."""
    from distir.transforms.spmd.mapping import optimize

    if devices < 1:
        raise ConfigError(f"--devices {devices}: need at least 1")
    if budget_s is not None and budget_s <= 0:
        raise ConfigError(f"--budget {budget_s}: give a positive number of seconds")
    batch = batch_size or default_batches(w)[0]
    fn = w.prepared([batch]).build(batch)
    return optimize(fn, devices, hardware, batch_size=batch, budget_s=budget_s, **kw), batch


def report(res: Any, title: str, top: int = 8) -> str:
    """A text table of the simulated plans, fastest first, and the search's counts."""
    lines = [title, f"search: {res.seconds:.1f} s; per mesh: " + "; ".join(
        ", ".join(f"{k} {v}" for k, v in m.items() if k != "best_simulated_s")
        for m in res.stats.get("meshes", []))]
    lines.append(f"{'mesh':>6} {'simulated ms':>13} {'estimate ms':>12} {'peak GiB':>9} fits")
    for c in res.candidates[:top]:
        peak = max(c.sim.peak_memory_bytes.values()) / 2**30 if c.sim is not None else 0.0
        lines.append(f"{str(c.assignment.mesh):>6} {c.simulated_s * 1e3:13.3f} "
                     f"{c.estimate_s * 1e3:12.3f} {peak:9.2f} {'yes' if c.fits else 'no'}")
    return "\n".join(lines)
