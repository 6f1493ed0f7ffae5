"""``distir optimize``: the per-op search (``distir.optimize``) on a workload, and its report.

The search itself lives in ``distir.transforms.spmd.optimize``; this module builds the
workload's sequential step (a preset, a family with sizes, or a model file, as for
``distir grid-search``), runs the search, and formats the plans it simulated.
"""

from __future__ import annotations

import csv
import math
import os
import sys
from collections.abc import Iterator
from typing import Any

from distir._util import STDERR
from distir.errors import ConfigError
from grid_search.executors import RayExecutor, _import_ray, in_order
from grid_search.models import Workload, default_batches

__all__ = ["optimize_workload", "report", "run_top_plans", "PLAN_COLUMNS", "save_plans",
           "run_saved_plans", "RayMeshes"]

PLAN_COLUMNS = ["rank", "mesh", "plan", "simulated_ms", "estimate_ms",
                "peak_memory_predicted_bytes", "measured_status", "measured_ms",
                "measured_peak_memory_bytes", "measured_static_peak_bytes", "measured_device",
                "program_fingerprint", "reason"]
"""The columns of ``run_top_plans``' CSV: one row per plan run, predicted beside measured.
``measured_peak_memory_bytes`` is the CUDA allocator's peak (empty on the CPU);
``measured_static_peak_bytes`` the most bytes live by the types of the rank's program."""


def optimize_workload(w: Workload, devices: int, *, hardware: Any = "h100-sxm",
                      batch_size: int | None = None, budget_s: float | None = None,
                      substitutions: list[str] | None = None, depth: int = 2,
                      **kw: Any) -> tuple[Any, int]:
    """``(OptimizeResult, batch size)`` of ``w``'s step at ``batch_size`` (default: the
    workload's first default batch) over ``devices`` devices. With ``substitutions`` (rule
    names; an empty list: all of them), the rewrites of the step are searched too
    (``optimize_with_substitutions``, to ``depth`` rewrites, within ``budget_s``, default
    120 s, each rewrite's placement search unbounded)."""
    from distir.transforms.spmd.mapping import optimize

    if devices < 1:
        raise ConfigError(f"--devices {devices}: need at least 1")
    if budget_s is not None and budget_s <= 0:
        raise ConfigError(f"--budget {budget_s}: give a positive number of seconds")
    batch = batch_size or default_batches(w)[0]
    fn = w.prepared([batch]).build(batch)
    if substitutions is not None:
        from distir.transforms.spmd.rewrite_search import optimize_with_substitutions

        return optimize_with_substitutions(
            fn, devices, hardware, substitutions=substitutions or None, depth=depth,
            budget_s=budget_s or 120.0, batch_size=batch, **kw), batch
    return optimize(fn, devices, hardware, batch_size=batch, budget_s=budget_s, **kw), batch


def report(res: Any, title: str, top: int = 8) -> str:
    """A text table of the simulated plans, fastest first, and the search's counts."""
    lines = [title, f"search: {res.seconds:.1f} s; per mesh: " + "; ".join(
        ", ".join(str(v) if k in ("search", "error") else f"{k} {v}"
                  for k, v in m.items() if k != "best_simulated_s")
        for m in res.stats.get("meshes", []))]
    lines.append(f"{'mesh':>6} {'plan':>8} {'simulated ms':>13} {'estimate ms':>12} "
                 f"{'peak GiB':>9} fits")
    for c in res.candidates[:top]:
        peak = max(c.sim.held_bytes.values()) / 2**30 if c.sim is not None else 0.0
        est = "-" if c.estimate_s != c.estimate_s else f"{c.estimate_s * 1e3:.3f}"
        lines.append(f"{str(c.assignment.mesh):>6} {c.origin:>8} {c.simulated_s * 1e3:13.3f} "
                     f"{est:>12} {peak:9.2f} {'yes' if c.fits else 'no'}")
    return "\n".join(lines)


def _peak(sim: Any) -> float:
    return float(max(sim.held_bytes.values())) if sim is not None else math.nan


def _top_fitting(res: Any, k: int) -> list[Any]:
    """The ``k`` fastest simulated plans that fit, distinct programs only."""
    from grid_search.real import program_fingerprint

    out: list[Any] = []
    seen: set[str] = set()
    for c in res.candidates:
        if len(out) >= k or not c.fits:
            break
        fp = program_fingerprint(c.program)
        if fp not in seen:
            seen.add(fp)
            out.append(c)
    return out


def run_top_plans(res: Any, k: int, *, backend: str | None = None, out: str | None = None,
                  hardware: str | None = None, steps: int = 5, warmup: int = 2,
                  progress: Any = STDERR, cuda_graph: bool = False,
                  ) -> list[dict[str, Any]]:
    """Run the ``k`` fastest fitting plans of an ``OptimizeResult`` for real (each its
    lowered SPMD program, through the PyTorch backend; ``cuda_graph``: each step replayed
    as a CUDA graph), print predicted vs measured, the Spearman rank correlation and
    whether the plan predicted fastest is within 5% of the fastest measured, and write
    ``PLAN_COLUMNS`` to the CSV ``out``. Returns the rows."""
    if k < 1:
        raise ConfigError(f"--run-top {k}: need at least 1")
    plans = [(str(c.assignment.mesh), c.origin, c.simulated_s, c.estimate_s, _peak(c.sim),
              c.program) for c in _top_fitting(res, k)]
    return _run_plans(plans, backend=backend, out=out, hardware=hardware, steps=steps,
                      warmup=warmup, progress=progress, cuda_graph=cuda_graph)


def _run_plans(plans: list[tuple[str, str, float, float, float, Any]], *,
               backend: str | None, out: str | None, hardware: str | None, steps: int,
               warmup: int, progress: Any, cuda_graph: bool = False,
               ) -> list[dict[str, Any]]:
    from grid_search.real import measure_programs, profile_mismatch, spearman

    measured = measure_programs([(f"{mesh} {origin}", prog) for mesh, origin, *_, prog
                                 in plans], backend=backend, steps=steps, warmup=warmup,
                                progress=progress, cuda_graph=cuda_graph)
    rows: list[dict[str, Any]] = []
    for n, ((mesh, origin, sim_s, est_s, peak, _), m) in enumerate(
            zip(plans, measured, strict=True)):
        lat = m.get("measured_latency_s")
        rows.append({"rank": n + 1, "mesh": mesh, "plan": origin,
                     "simulated_ms": f"{sim_s * 1e3:.6f}",
                     "estimate_ms": "" if math.isnan(est_s) else f"{est_s * 1e3:.4f}",
                     "peak_memory_predicted_bytes": "" if math.isnan(peak) else int(peak),
                     "measured_status": m.get("measured_status", ""),
                     "measured_ms": f"{lat * 1e3:.4f}" if isinstance(lat, float) else "",
                     **{c: m.get(c, "") for c in ("measured_peak_memory_bytes",
                                                  "measured_static_peak_bytes",
                                                  "measured_device", "program_fingerprint",
                                                  "reason")}})
    if out:
        with open(out, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, PLAN_COLUMNS)
            w.writeheader()
            w.writerows(rows)
    print(f"\n{'rank':>4} {'mesh':>6} {'plan':>8} {'simulated ms':>13} {'measured ms':>12} "
          f"{'pred GiB':>9} {'meas GiB':>9} status")
    for r in rows:
        meas_mem = r["measured_peak_memory_bytes"] or r["measured_static_peak_bytes"]
        print(f"{r['rank']:>4} {r['mesh']:>6} {r['plan']:>8} {float(r['simulated_ms']):13.3f} "
              f"{r['measured_ms'] or '-':>12} "
              f"{_gib(r['peak_memory_predicted_bytes']):>9} {_gib(meas_mem):>9} "
              f"{r['measured_status']}")
    mismatch = profile_mismatch(hardware, [str(r["measured_device"]) for r in rows])
    if mismatch:
        print(f"warning: {mismatch}")
    ok = [r for r in rows if r["measured_status"] == "ok" and r["measured_ms"]]
    pred = [float(r["simulated_ms"]) for r in ok]
    meas = [float(r["measured_ms"]) for r in ok]
    if ok:
        rho = spearman(pred, meas)
        top = min(range(len(ok)), key=lambda i: pred[i])
        regret = meas[top] / min(meas) - 1.0
        print(f"{len(ok)} of {len(rows)} plans ran; Spearman's rank correlation of predicted "
              f"and measured latency: {'n/a' if math.isnan(rho) else f'{rho:.3f}'}; the plan "
              f"predicted fastest measured {meas[top]:.3f} ms, "
              f"{regret * 100:.1f}% over the fastest measured ({min(meas):.3f} ms): "
              f"{'within' if regret <= 0.05 else 'NOT within'} 5%")
    else:
        print(f"none of the {len(rows)} plans ran")
    if out:
        print(f"measured: {out}", file=sys.stderr)
    return rows


def _gib(x: Any) -> str:
    try:
        return f"{float(x) / 2**30:.2f}"
    except (TypeError, ValueError):
        return "-"


def save_plans(res: Any, directory: str, k: int) -> list[str]:
    """Write the ``k`` fastest fitting plans of ``res`` to ``directory`` as DistIR text
    (``plan1.dir`` the fastest) and their predictions to ``directory/plans.csv``;
    ``run_saved_plans(directory)`` runs them later. Returns the files written."""
    import distir

    os.makedirs(directory, exist_ok=True)
    files: list[str] = []
    rows: list[dict[str, Any]] = []
    for n, c in enumerate(_top_fitting(res, k)):
        name = f"plan{n + 1}.dir"
        with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
            f.write(distir.dumps(c.program))
        files.append(os.path.join(directory, name))
        rows.append({"file": name, "mesh": str(c.assignment.mesh), "plan": c.origin,
                     "simulated_ms": f"{c.simulated_s * 1e3:.6f}",
                     "estimate_ms": "" if math.isnan(c.estimate_s)
                     else f"{c.estimate_s * 1e3:.4f}",
                     "peak_memory_predicted_bytes": int(_peak(c.sim))})
    with open(os.path.join(directory, "plans.csv"), "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, list(_SAVED_COLUMNS))
        w.writeheader()
        w.writerows(rows)
    return files


_SAVED_COLUMNS = ("file", "mesh", "plan", "simulated_ms", "estimate_ms",
                  "peak_memory_predicted_bytes")


def run_saved_plans(directory: str, *, backend: str | None = None, out: str | None = None,
                    hardware: str | None = None, steps: int = 5, warmup: int = 2,
                    progress: Any = STDERR, cuda_graph: bool = False,
                    ) -> list[dict[str, Any]]:
    """``run_top_plans`` for the plans ``save_plans`` wrote to ``directory``."""
    import distir

    index = os.path.join(directory, "plans.csv")
    if not os.path.isfile(index):
        raise ConfigError(f"{directory}: no plans.csv here; write one with "
                          "`distir optimize ... --save-plans DIR`")
    with open(index, newline="", encoding="utf-8") as f:
        saved = list(csv.DictReader(f))
    if not saved or set(_SAVED_COLUMNS) - set(saved[0]):
        raise ConfigError(f"{index}: not a plans.csv of `distir optimize --save-plans` "
                          f"(columns {', '.join(_SAVED_COLUMNS)})")
    plans = []
    for r in saved:
        fn = distir.load(os.path.join(directory, r["file"])).entry
        est = float(r["estimate_ms"]) / 1e3 if r["estimate_ms"] else math.nan
        plans.append((r["mesh"], r["plan"], float(r["simulated_ms"]) / 1e3, est,
                      float(r["peak_memory_predicted_bytes"]), fn))
    return _run_plans(plans, backend=backend, out=out, hardware=hardware, steps=steps,
                      warmup=warmup, progress=progress, cuda_graph=cuda_graph)


def _mesh_remote(fn: Any, mesh: Any, hw: Any, batch_size: int | None,
                 opts: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """One mesh of ``optimize`` in a Ray worker (see ``RayMeshes``)."""
    from distir.transforms.program import Program
    from distir.transforms.spmd.mapping import mesh_candidates

    return mesh_candidates(Program(fn), mesh, hw, batch_size, None, **opts)


class RayMeshes(RayExecutor):
    """``optimize``'s meshes as Ray tasks, one per mesh (``distir optimize --executor
    ray``): each task builds the program's view, searches its mesh and lowers and
    simulates that mesh's plans and its seeded ones (``mapping.mesh_candidates``), as the
    local loop does, so without a budget the candidates and the plan chosen are the same.
    The sequential function is put in the object store once. ``address``, ``workers``
    (the most meshes at once) and the code shipping are ``RayExecutor``'s. A budget is a
    deadline every task checks between segments (tasks run at once, not in the local
    loop's order)."""

    def map_meshes(self, fn: Any, meshes: list[Any], hw: Any, batch_size: int | None,
                   opts: dict[str, Any], deadline: float | None,
                   ) -> Iterator[tuple[list[Any], dict[str, Any]]]:
        """``(candidates, stats)`` of every mesh, in the order of ``meshes``."""
        ray = _import_ray()
        connected = self._connect(ray)
        pending: dict[Any, int] = {}
        try:
            workers = self.workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
            task = ray.remote(_mesh_remote).options(num_cpus=1)
            fn_ref = ray.put(fn)
            # without seeded plans the first mesh is searched to the end
            calls = [(fn_ref, m, hw, batch_size,
                      dict(opts, deadline=deadline if opts.get("seeded", True) or i else None))
                     for i, m in enumerate(meshes)]
            yield from in_order(ray, task, calls, workers, pending)
        finally:
            for ref in pending:
                ray.cancel(ref)
            if connected:
                ray.shutdown()
