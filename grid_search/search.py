"""Run a search: transform and simulate every configuration, write rows as they finish.

The simulations run where an executor puts them (``grid_search.executors``: local
processes by default, or a Ray cluster). Rows are written to the CSV in enumeration order,
one line per configuration, flushed as soon as it is known, so an interrupted search loses
nothing and ``resume=True`` continues where it stopped and produces the same file as an
uninterrupted run.
"""

from __future__ import annotations

import csv
import io
import json
import os
import time
from collections.abc import Callable, Iterable
from contextlib import closing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from distir._util import STDERR
from distir.errors import ConfigError, DistIRError
from distir.ir.core import Function, Module
from grid_search.executors import Executor, LocalExecutor
from grid_search.models import TRANSFORMS, Workload, transform_of
from grid_search.space import Config, enumerate_space, strategy

if TYPE_CHECKING:
    from distir.analysis.hardware import Hardware

__all__ = ["COLUMNS", "evaluate", "run_search", "read_rows", "SearchResult"]

COLUMNS = [
    "model", "batch_size", "dp", "tp", "pp", "microbatches", "schedule", "strategy",
    "devices", "status", "fits", "latency_s", "throughput", "peak_memory_bytes",
    "peak_memory_per_device", "ops", "sim_seconds", "reason", "hardware", "transform",
]
"""The columns of a results CSV. ``hardware`` is the name of the profile simulated (with
``+graph`` for steps replayed as CUDA graphs, ``Hardware.for_cuda_graphs``); ``transform``
what wrote the programs (``passes``: ``distir.transforms.dtp``, the spmd passes; or
``tower``: the builder ``dtp`` was before them, ``Workload.transform``). Files written
before those existed lack the last one or two columns, and files written before the
switch say ``dtp``: those rows are the tower's (``models.transform_of``)."""


# -- one configuration (runs in a worker process) ------------------------------------------

@dataclass
class _WorkerState:
    """What a worker process knows of the search it serves. ``token`` names that search
    (Ray workers outlive searches and serve several); ``models`` caches the analysed
    sequential model per batch size, or the ``DistIRError`` that analysing it raised (so
    a model the transform cannot take is analysed once, and every row says why)."""

    workload: Workload | None = None
    hardware: Any = "h100-sxm"  # a Hardware, or a profile name or path
    models: dict[int, Any] | None = None
    token: str = ""
    simulator: Any = None
    """The worker's ``Simulator`` (made at its first configuration), shared by every
    configuration: op records, costs and call summaries of equal stage and layer
    functions are computed once per worker, not once per configuration."""


_STATE = _WorkerState()


def _init_worker(workload: Workload, hardware: Any, token: str = "") -> None:
    _STATE.workload = workload
    _STATE.hardware = hardware
    _STATE.models = {}
    _STATE.token = token
    _STATE.simulator = None


def _model(batch: int) -> Any:
    """The sequential model at this batch size, analysed once for every configuration."""
    assert _STATE.workload is not None and _STATE.models is not None
    an = _STATE.models.get(batch)
    if an is None:
        w = _STATE.workload
        try:
            an = w.analyze(batch, hardware=_STATE.hardware)
        except DistIRError as e:
            an = e
        _STATE.models[batch] = an
    if isinstance(an, DistIRError):
        raise an
    return an


def evaluate(cfg: Config) -> dict[str, Any]:
    """Transform and simulate one configuration in this process; never raises for a
    configuration the transform refuses or the simulator cannot place: the row says why
    (``refused``: the transform's reason; ``error``: another analysis' error, or a bug met
    in this configuration, named as one, so that one configuration cannot end a search).

    The cyclic garbage collector is paused for the whole configuration, and resumes once
    its program is gone (freed by reference counting): a collection then walks only what
    the caches kept, where one at the end of the transform or the simulation would walk
    the whole new program (a quarter of a GPT-2 175B configuration's time). The little
    cyclic garbage a configuration leaves is collected between configurations."""
    from distir._util import no_gc

    with no_gc():
        return _evaluate(cfg)


def _evaluate(cfg: Config) -> dict[str, Any]:
    from distir.analysis.replicas import peers_run_alike, replicas_run_alike
    from distir.analysis.simulator import Simulator
    row: dict[str, Any] = {k: "" for k in COLUMNS}
    row.update(cfg.as_row())
    row["strategy"] = strategy(cfg.dp, cfg.tp, cfg.pp)
    row["devices"] = cfg.devices
    row["hardware"] = getattr(_STATE.hardware, "name", _STATE.hardware)
    row["transform"] = _STATE.workload.transform if _STATE.workload is not None else "passes"
    t0 = time.perf_counter()
    step = "the transform"
    try:
        seq = _model(cfg.batch_size)
        if _STATE.simulator is None:
            _STATE.simulator = Simulator(_STATE.hardware, share_equal_functions=True)
        sync = _STATE.workload is not None and _STATE.workload.sync and cfg.dp > 1
        # One replica, and one tensor-parallel rank, written and simulated for all
        # (exact: distir.analysis.replicas), where the replicas (the ranks) run alike;
        # the synchronisation search rewrites every replica.
        hw = _STATE.simulator.hw
        w = _STATE.workload
        assert w is not None
        replicas = cfg.dp == 1 or replicas_run_alike(hw, cfg.dp, cfg.tp * cfg.pp)
        ranks = cfg.tp > 1 and peers_run_alike(hw, cfg.tp)
        if not sync and replicas and (cfg.dp > 1 or ranks):
            fn = w.replica_program(seq, cfg, ranks)
        else:
            fn = w.program(seq, cfg)
        step = "the simulator"
        note = ""
        if sync:
            step = "the synchronisation search"
            fn, note = w.synchronized(fn, cfg, _STATE.hardware, _STATE.simulator)
            step = "the simulator"
        sim = _STATE.simulator.simulate_function(fn, batch_size=cfg.batch_size)
    except DistIRError as e:
        kind = type(e).__name__
        return _failed(row, "refused" if kind == "TransformError" else "error", e.message, t0)
    except Exception as e:  # noqa: BLE001 - a bug in one configuration: record it, go on
        first = (str(e).strip().splitlines() or [""])[0]
        return _failed(row, "error", f"internal error in {step} (a bug in distir; please "
                       f"report it): {type(e).__name__}: {first}", t0)
    peaks = sim.held_bytes  # (with the libraries' workspaces, as the allocator counts)
    per_dev = [int(peaks.get(d, 0)) for d in range(cfg.devices)]
    capacity = sim.memory_capacity_bytes
    fits = max(per_dev) <= capacity
    over = None
    # Near the capacity: the caching allocator's reserve against what each rank's card
    # offers besides its communicators (distir.analysis.allocator) decides.
    from distir.analysis.allocator import near_capacity

    try:
        verdict = near_capacity(fn, dict(enumerate(per_dev)), sim.hardware, cfg.devices)
    except Exception as e:  # noqa: BLE001 - a bug in the replay: keep the liveness verdict
        first = (str(e).strip().splitlines() or [""])[0]
        note = (note + "; " if note else "") + (
            f"allocator replay failed (a bug in distir; please report it): "
            f"{type(e).__name__}: {first}")
        verdict = None
    if verdict is not None:
        fits = verdict.fits
        capacity = verdict.capacity
        if not fits and verdict.replayed:
            over = verdict
    ws = sim.hardware.workspace_held  # (blocks the replayed program does not name)
    row.update(
        status="ok" if fits else "oom",
        fits=fits,
        latency_s=sim.latency_s,
        throughput=cfg.batch_size / sim.latency_s if sim.latency_s > 0 else "",
        peak_memory_bytes=max(per_dev),
        peak_memory_per_device=json.dumps(per_dev),
        ops=fn.num_ops(inline_calls=True),
        sim_seconds=round(time.perf_counter() - t0, 4),
        reason=note if fits else (note + "; " if note else "") + (
            f"needs {max(per_dev) / 2**30:.1f} GiB on device {per_dev.index(max(per_dev))}, "
            f"has {capacity / 2**30:.1f} GiB" if over is None else
            f"the caching allocator would reserve "
            f"{(over.reserve.reserved_bytes + ws) / 2**30:.1f} GiB on device {over.device} "
            f"(live tensors and the libraries' workspaces "
            f"{(over.reserve.allocated_bytes + ws) / 2**30:.1f} GiB at most), has "
            f"{over.capacity / 2**30:.1f} GiB besides its communicators"),
    )
    return row


def _failed(row: dict[str, Any], status: str, reason: str, t0: float) -> dict[str, Any]:
    row.update(status=status, fits=False, reason=reason,
               sim_seconds=round(time.perf_counter() - t0, 4))
    return row


# -- the CSV -----------------------------------------------------------------------------

def _row_key(row: dict[str, Any]) -> tuple:
    return (row["model"], int(row["batch_size"]), int(row["dp"]), int(row["tp"]),
            int(row["pp"]), int(row["microbatches"]), row["schedule"])


def read_rows(path: str) -> list[dict[str, str]]:
    """The complete rows of a results CSV; a torn last line (a killed write) is dropped."""
    if not os.path.exists(path):
        return []
    with open(path, newline="", encoding="utf-8") as f:
        text = f.read()
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines = lines[:-1]
    rows = list(csv.DictReader(io.StringIO("".join(lines))))
    return [r for r in rows if None not in r.values() and None not in r]


def _kept_rows(path: str, resume: bool, hardware: str,
               transform: str = "passes") -> list[dict[str, str]]:
    """The complete rows of an old CSV that ``resume`` keeps (none without it); reads only.
    Rows simulated on another profile than ``hardware`` (a name), or written by another
    transform, are refused: a ranking would mix two machines' (transforms') figures."""
    if not resume or not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        header = f.readline().strip().split(",")
    if not any(header[: len(COLUMNS) - n] == COLUMNS[: len(COLUMNS) - n] for n in (0, 1, 2)):
        raise ConfigError(f"{path}: not a results file of this version (its columns differ); "
                          "write to a new file or drop --resume")
    rows = read_rows(path)
    other = sorted({h for r in rows if (h := r.get("hardware") or "") and h != hardware})
    if other:
        raise ConfigError(f"{path}: its rows were simulated on {', '.join(other)}, this search "
                          f"on {hardware}: resume with that profile (and --cuda-graph as "
                          "then), or write to a new file")
    written = sorted({t for r in rows if (t := transform_of(r)) != transform})
    if written:
        raise ConfigError(f"{path}: its programs were written by --transform "
                          f"{', '.join(written)}, this search's by {transform}: resume with "
                          "that transform, or write to a new file")
    return rows


def _start_csv(path: str, kept: list[dict[str, str]]) -> None:
    """Write the header and the kept rows: a torn last line of an old file is gone, so
    appended rows start on a line of their own."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(kept)


# -- the search --------------------------------------------------------------------------

@dataclass
class SearchResult:
    rows: list[dict[str, Any]]
    skipped: int
    seconds: float


def _progress(done: int, total: int, t0: float, stream: Any) -> None:
    """A bar redrawn in place on a terminal; a line per tenth of the work elsewhere."""
    if stream is None or total == 0:
        return
    el = time.perf_counter() - t0
    eta = el / done * (total - done) if done else 0.0
    msg = f"{done}/{total} configurations, {el:.1f} s elapsed, ~{eta:.0f} s left"
    if getattr(stream, "isatty", lambda: False)():
        width = 30
        filled = int(done / total * width)
        stream.write(f"\r[{'#' * filled}{'-' * (width - filled)}] {msg} ")
        if done == total:
            stream.write("\n")
    elif done == total or done % max(1, total // 10) == 0:
        stream.write(msg + "\n")
    stream.flush()


def run_search(workload: Workload | Function | Module,
               configs: Iterable[Config] | None = None, *,
               hardware: str | Hardware = "h100-sxm", devices: int | None = None,
               out: str | None = None, workers: int = 1, resume: bool = False,
               progress: Any = STDERR,
               on_row: Callable[[dict[str, Any]], None] | None = None,
               executor: Executor | None = None, sync: str = "",
               transform: str = "passes") -> SearchResult:
    """Evaluate ``configs`` (in order) with ``executor`` (default: ``workers`` local
    processes); append rows to ``out``. ``hardware`` (a profile name, path or ``Hardware``)
    is loaded here once. Bad options (an unknown profile, a results file of another format,
    an executor that cannot start) raise before ``out`` is written.

    ``workload`` may be the user's own ``Function`` or ``Module`` (``workload(fn)``: its
    batch size as built). Without ``configs``, the space is every D·T·P = ``devices`` at
    the workload's default batch sizes (``enumerate_space``). A user's model is built here
    for every batch size of the configurations (``Workload.prepared``) and travels to the
    workers as functions. ``sync="searched"`` searches each data-parallel configuration's
    gradient synchronisation (``grid_search.sync_search.searched_step``; its choice is in
    the row's ``reason``). ``transform="passes"`` (the default) writes each configuration
    with ``distir.transforms.dtp``, the composition of the spmd passes: replica 0's
    program (``dtp_replica``, of its tensor-parallel rank 0 alone where the ranks run
    alike) where the replicas run alike, else the whole one, writing up to
    ``PASSES_MAX_DEVICES`` devices (a larger one is a refused row); ``"tower"`` with the
    builder ``dtp`` was before (``distir.transforms.tower``). A configuration the
    transform cannot write is a refused row with its reason (``Workload.program``,
    ``Workload.replica_program``)."""
    from distir.analysis.hardware import load_hardware
    from grid_search.models import default_batches
    from grid_search.models import workload as make_workload

    if not isinstance(workload, Workload):
        workload = make_workload(workload)
    if sync not in ("", "none", "searched"):
        raise ConfigError(f"run_search: sync must be 'none' or 'searched', got {sync!r}")
    if transform not in TRANSFORMS:
        raise ConfigError(f"run_search: transform must be one of {', '.join(TRANSFORMS)}, "
                          f"got {transform!r}")
    if sync == "searched" or transform != workload.transform:
        import dataclasses

        workload = dataclasses.replace(
            workload, sync=sync if sync == "searched" else workload.sync,
            transform=transform)
    if configs is None:
        if devices is None:
            raise ConfigError("run_search: give the configurations, or devices=N to search "
                              "every D/T/P/K on N devices")
        configs = enumerate_space(workload.name, devices, default_batches(workload),
                                  schedules=("1f1b",) if workload.training else ("gpipe",))
    hw = load_hardware(hardware)
    if executor is None:
        executor = LocalExecutor(workers)
    todo = list(configs)
    kept = _kept_rows(out, resume, hw.name, transform) if out is not None else []
    done_keys = {_row_key(r) for r in kept}
    pending = [c for c in todo if c.key not in done_keys]
    workload = workload.prepared(sorted({c.batch_size for c in pending}))
    rows: list[dict[str, Any]] = []
    with closing(executor.rows(workload, hw, pending)) as results:
        t0 = time.perf_counter()
        f = None
        if out is not None:
            _start_csv(out, kept)
            f = open(out, "a", newline="", encoding="utf-8")
        writer = csv.DictWriter(f, COLUMNS, extrasaction="ignore") if f is not None else None
        try:
            for i, row in enumerate(results, 1):
                rows.append(row)
                if writer is not None and f is not None:
                    writer.writerow(row)
                    f.flush()
                if on_row is not None:
                    on_row(row)
                _progress(i, len(pending), t0, progress)
        finally:
            if f is not None:
                f.close()
    return SearchResult(rows, len(todo) - len(pending), time.perf_counter() - t0)
