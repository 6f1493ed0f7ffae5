"""Real runs of simulated configurations, and how well the simulation predicted them.

``measure`` runs configurations on the local devices through the PyTorch backend, keeping
one session (workers and communicators) per world size; ``run_top`` runs a search's best
rows and adds measured columns to its CSV; ``accuracy`` compares predictions and
measurements (Spearman's rank correlation, latency and memory errors).
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from distir._util import STDERR
from grid_search.models import Workload
from grid_search.space import Config, strategy

__all__ = ["MEASURED_COLUMNS", "CLOCK_COLUMNS", "CONFIG_KEY", "config_key", "measure",
           "iter_measure", "run_top", "accuracy", "spearman", "program_fingerprint",
           "measure_programs", "clock_columns", "clock_report"]

CLOCK_COLUMNS = ["measured_sm_clock_mhz", "measured_max_sm_clock_mhz", "measured_clock_events"]
"""Columns of a measured row that say what the GPUs' clocks did during its run
(``distir.backend.clocks``): the busy SM clock (the lowest over the run's devices of each
one's median while busy), the card's maximum, and the clock-event reasons seen while busy
(``none``, or names joined by ``+``); empty where nothing could be read (no GPU, no
NVML)."""

MEASURED_COLUMNS = ["measured_status", "measured_latency_s", "measured_throughput",
                    "measured_peak_memory_bytes", "measured_peak_memory_per_device",
                    "measured_device", "measured_reason", "measured_host_share",
                    *CLOCK_COLUMNS, "program_fingerprint", "cuda_graph", "measured_nonfinite",
                    "measured_inputs"]
"""Columns ``run_top`` adds to a search's rows (``measured_reason``: why a run was refused
or failed, one line; the row's own ``reason`` is the simulation's; ``measured_host_share``:
an eager step's busiest host's own cost over its time, ``RunResult.host_share``; the
``CLOCK_COLUMNS``; the ``program_fingerprint`` of the program run and ``cuda_graph``
``true`` for replayed steps, so that ``study compare --model`` can check and simulate
them; ``measured_nonfinite``: how many results of the step held NaN, ``RunResult.nonfinite``,
a step whose time may not be training's; ``measured_inputs``: how the run's inputs were
made, ``INPUTS``)."""

INPUTS = "training-state"
"""``measured_inputs`` of the rows measured since runs draw an optimizer's state as a
training step holds it (``distir.analysis.state``), with ``+weights`` where a model file's
own weights were bound (``Workload.analyze(weights=True)``). Rows without it ran Adam's
updates on moments drawn from a normal distribution, at about half their training speed
(``grid_search/results/adam_step/``)."""


def clock_columns(report: Any) -> dict[str, Any]:
    """A ``ClockReport`` as the ``CLOCK_COLUMNS`` of a row, every one set: empty when no
    busy sample was read (no GPU, no NVML, or a run too short for the sampler), so that a
    row measured again never keeps an earlier run's clocks."""
    if report.busy_mhz is None:
        return dict.fromkeys(CLOCK_COLUMNS, "")
    return {"measured_sm_clock_mhz": report.busy_mhz,
            "measured_max_sm_clock_mhz": report.max_mhz or "",
            "measured_clock_events": report.events_text()}


def clock_report(row: dict[str, Any]) -> Any:
    """The ``ClockReport`` a row's ``CLOCK_COLUMNS`` record (rows read from CSV or built in
    memory), or ``None`` where they are empty (rows measured without clocks)."""
    from distir.backend.clocks import ClockReport

    events = str(row.get("measured_clock_events", "") or "")
    if not events or events == "nan":  # a cell left empty, as read by csv or pandas
        return None
    busy, top = row.get("measured_sm_clock_mhz", ""), row.get("measured_max_sm_clock_mhz", "")
    return ClockReport(busy_mhz=int(float(busy)) if busy not in ("", None) else None,
                       max_mhz=int(float(top)) if top not in ("", None) else None,
                       events=frozenset() if events == "none" else frozenset(events.split("+")),
                       samples=1)



CONFIG_KEY = ("batch_size", "dp", "tp", "pp", "microbatches", "schedule")
"""The columns that name a configuration of a study or search row."""


def config_key(row: dict[str, Any]) -> tuple[str, ...]:
    """A row's configuration, as text (rows read from CSV and rows built in memory alike)."""
    return tuple(str(row.get(c, "")) for c in CONFIG_KEY)


def _rank(xs: Sequence[float]) -> list[float]:
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):  # ties share their mean rank
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation of two equally long sequences (nan for fewer than 2)."""
    if len(a) != len(b) or len(a) < 2:
        return math.nan
    ra, rb = _rank(a), _rank(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = math.sqrt(sum((x - ma) ** 2 for x in ra))
    vb = math.sqrt(sum((y - mb) ** 2 for y in rb))
    return cov / (va * vb) if va and vb else math.nan


def program_fingerprint(fn: Any) -> str:
    """A short fingerprint (16 hex digits of the SHA-256 of its printed DistIR text) of the
    distributed program ``fn``: two programs print the same text exactly when they are the
    same program, so a measured row whose fingerprint differs from what the transform that
    wrote it builds today was measured on another program (other stage cuts, layouts or
    collectives). The text is independent of the machine, the hardware profile and hash
    seeds."""
    import hashlib

    import distir

    return hashlib.sha256(distir.dumps(fn).encode("utf-8")).hexdigest()[:16]


def measure(workload: Workload, configs: Iterable[Config], *, backend: str | None = None,
            steps: int = 5, warmup: int = 2, progress: Any = STDERR,
            hardware: Any = None) -> list[dict[str, Any]]:
    """Run each configuration for real; one row per configuration with measured columns."""
    return list(iter_measure(workload, configs, backend=backend, steps=steps, warmup=warmup,
                             progress=progress, hardware=hardware))


def iter_measure(workload: Workload, configs: Iterable[Config], *, backend: str | None = None,
                 steps: int = 5, warmup: int = 2, progress: Any = STDERR,
                 memory_limit: int | None = None, profile: str | None = None,
                 profile_marks: bool = True, hardware: Any = None,
                 fresh_sessions: bool = False, cuda_graph: bool = False,
                 timeout_s: float = 300.0, host_cost: bool = False
                 ) -> Iterator[dict[str, Any]]:
    """``measure``, yielding each row as soon as it is measured (so a caller can save it).

    An out-of-memory run is recorded (``measured_status`` ``oom``), not raised; a
    configuration the transform refuses is recorded as ``refused``. Each row that ran
    records the ``program_fingerprint`` of the program it ran. ``memory_limit`` (bytes
    per device) caps each run's allocator; ``profile`` (a directory) writes, after every
    timed run of a device count, one more profiled step of each configuration, its
    per-rank traces to ``profile/b<batch>_d<D>_t<T>_p<P>_k<K>/`` (``distir run --profile``;
    ``profile_marks=False``: without the per-op marks). ``hardware`` is the profile the
    programs were simulated on, which weighs pipeline stages balanced by cost
    (``Workload.analyze``), so that the programs run are the ones simulated.
    ``fresh_sessions`` runs each configuration in a session of its own (a memory check:
    the communicators of earlier programs hold device memory outside the allocator).
    ``cuda_graph`` times each step replayed as a CUDA graph (``Session.run``); its rows say
    so (``cuda_graph`` ``true``), and ``study compare`` simulates them without host
    dispatch (``Hardware.for_cuda_graphs``). ``timeout_s``: how long a collective may wait
    for its peers before the run is declared hung (its row then says so). The programs are
    written as the search wrote them (``Workload.program``: ``dtp``, the spmd passes, or
    the builder tower when ``workload.transform`` is ``"tower"``), their gradients
    synchronised as the search chose where ``workload.sync`` is ``"searched"``
    (``Workload.synchronized``, on ``hardware``; the row's ``sync`` names the choice).
    ``host_cost`` (eager
    steps) measures each run's host cost of a step after its timed steps
    (``RunResult.host_cost_s``): rows gain ``measured_host_cost_s``, the busiest rank's,
    and ``measured_host_share``, that over the step's time (from ``HOST_BOUND``, 0.8, the
    step is paced by its hosts: ``study compare`` reports such rows apart). On GPUs (NCCL),
    the clocks of each run's devices are sampled while it runs (``ClockSampler``) and rows
    gain the ``CLOCK_COLUMNS``; a run measured on slowed cards (``ClockReport.slowed``) is
    named as such in the progress line, and ``study compare`` reports such rows apart.
    """
    from distir.backend import Session
    from distir.backend.clocks import ClockSampler
    from distir.backend.timing import HOST_BOUND
    from distir.errors import DistIRError, TransformError

    by_size: dict[int, list[Config]] = {}
    for c in configs:
        by_size.setdefault(c.devices, []).append(c)
    models: dict[int, Any] = {}
    for size, group in sorted(by_size.items()):
        # One session per configuration with fresh_sessions: a session keeps every
        # communicator its programs made, which holds device memory outside the
        # allocator, so a configuration run after others would hold theirs too.
        for part in ([[c] for c in group] if fresh_sessions else [group]):
            with Session(size, backend, timeout_s=timeout_s) as s:
                # Profiled steps come after every timed run of the session: a process that
                # has run the profiler times later steps differently (host-bound steps
                # measured up to 1.9x slower after a profiled one,
                # grid_search/results/h200x4_kernels).
                profiled: list[tuple[Config, Any]] = []
                for c in part:
                    row: dict[str, Any] = dict(c.as_row(), strategy=strategy(c.dp, c.tp, c.pp),
                                               devices=c.devices)
                    if cuda_graph:
                        row["cuda_graph"] = "true"
                    try:
                        seq = models.get(c.batch_size)
                        if seq is None:
                            seq = models[c.batch_size] = workload.analyze(
                                c.batch_size, hardware=hardware, weights=True)
                        fn = workload.program(seq, c)
                        if workload.sync:  # the synchronisation the search chose
                            fn, row["sync"] = workload.synchronized(
                                fn, c, hardware if hardware is not None else "h100-sxm")
                        row["program_fingerprint"] = program_fingerprint(fn)
                        with ClockSampler(size if s.backend == "nccl" else 0) as clocks:
                            r = s.run(fn, steps=steps, warmup=warmup,
                                      memory_limit=memory_limit, cuda_graph=cuda_graph,
                                      host_cost=host_cost and not cuda_graph)
                        if profile is not None and r.status == "ok":
                            profiled.append((c, fn))
                    except DistIRError as e:
                        status = "refused" if isinstance(e, TransformError) else "error"
                        row.update(measured_status=status, reason=e.message)
                        if progress is not None:
                            progress.write(f"{status} {c} batch {c.batch_size}: {e.message}\n")
                            progress.flush()
                        yield row
                        continue
                    peaks = [p or 0 for p in r.peak_memory_bytes]
                    lat = r.step_latency_s
                    row.update(measured_status=r.status,
                               measured_latency_s=lat if lat is not None else "",
                               measured_throughput=(c.batch_size / lat) if lat else "",
                               measured_peak_memory_bytes=max(peaks) if peaks else "",
                               measured_peak_memory_per_device=str(peaks),
                               measured_device=r.device_name, reason=r.message)
                    share = r.host_share
                    if share is not None:
                        row.update(measured_host_cost_s=r.busiest_host_cost_s,
                                   measured_host_share=share)
                    row.update(clock_columns(clocks.report))
                    src = workload.source
                    row.update(measured_inputs=INPUTS + (
                        "+weights" if src is not None and src.path is not None else ""))
                    bad = sum(r.nonfinite)
                    if bad:
                        row.update(measured_nonfinite=bad)
                    if progress is not None:
                        shown = f"{lat * 1e3:.2f} ms" if lat else f"{r.status}: {r.message}"
                        if bad:
                            shown += f" (computed on NaN: {bad} results; not training's step)"
                        if share is not None and share >= HOST_BOUND:
                            shown += f" (paced by the host: {share:.0%})"
                        if clocks.report.slowed:
                            shown += f" (on slowed GPUs: {clocks.report.text()})"
                        progress.write(f"measured {c} batch {c.batch_size}: {shown}\n")
                        progress.flush()
                    yield row
                for c, fn in profiled:
                    assert profile is not None
                    where = os.path.join(
                        profile, f"b{c.batch_size}_d{c.dp}_t{c.tp}_p{c.pp}_k{c.microbatches}")
                    try:
                        s.run(fn, steps=1, warmup=1, memory_limit=memory_limit, profile=where,
                              profile_marks=profile_marks, cuda_graph=cuda_graph)
                    except DistIRError as e:  # the timed row stands; say why there is no trace
                        if progress is not None:
                            progress.write(f"no trace of {c} batch {c.batch_size}: {e.message}\n")


def measure_programs(programs: Sequence[tuple[str, Any]], *, backend: str | None = None,
                     steps: int = 5, warmup: int = 2, progress: Any = STDERR,
                     memory_limit: int | None = None,
                     cuda_graph: bool = False) -> list[dict[str, Any]]:
    """Run arbitrary distributed programs (``(label, Function)``, each placed on devices
    ``0 .. n-1``) for real through the PyTorch backend, one ``Session`` per world size
    (programs of one size share its workers); one row per program, in order, with
    ``label``, ``program_fingerprint`` and the ``MEASURED_COLUMNS`` (plus
    ``measured_static_peak_bytes``: the most bytes live by the types, known on the CPU
    too). A run the backend refuses or that fails is a row with ``measured_status``
    ``error`` and its ``reason``, not an exception. ``cuda_graph``: each step replayed as
    a CUDA graph."""
    from distir.backend import Session
    from distir.backend.launch import prepare
    from distir.errors import DistIRError

    rows: list[dict[str, Any] | None] = [None] * len(programs)
    by_size: dict[int, list[tuple[int, Any, Any]]] = {}
    for n, (label, fn) in enumerate(programs):
        try:
            proj, args = prepare(fn, None, None)  # the devices the program uses
        except DistIRError as e:
            rows[n] = {"label": label, "program_fingerprint": program_fingerprint(fn),
                       "measured_status": "error", "reason": e.message}
            continue
        by_size.setdefault(proj.world_size, []).append((n, proj, args))
    for size, group in sorted(by_size.items()):
        with Session(size, backend) as s:
            for n, proj, args in group:
                label, fn = programs[n]
                row: dict[str, Any] = {"label": label, "devices": size,
                                       "program_fingerprint": program_fingerprint(fn)}
                try:
                    r = s.run_prepared(proj, args, steps=steps, warmup=warmup, outputs=False,
                                       memory_limit=memory_limit, cuda_graph=cuda_graph)
                except DistIRError as e:
                    row.update(measured_status="error", reason=e.message)
                    rows[n] = row
                    continue
                peaks = [p or 0 for p in r.peak_memory_bytes]
                lat = r.step_latency_s
                row.update(measured_status=r.status,
                           measured_latency_s=lat if lat is not None else "",
                           measured_peak_memory_bytes=max(peaks) if any(peaks) else "",
                           measured_peak_memory_per_device=str(peaks),
                           measured_static_peak_bytes=max(r.static_peak_bytes, default=""),
                           measured_device=r.device_name, reason=r.message)
                if progress is not None:
                    shown = f"{lat * 1e3:.2f} ms" if lat else r.status
                    progress.write(f"measured {label}: {shown}\n")
                    progress.flush()
                rows[n] = row
    return [r for r in rows if r is not None]


def _f(x: Any) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def kendall(a: Sequence[float], b: Sequence[float]) -> float:
    """Kendall's rank correlation (tau-b: ties in either sequence counted as neither
    concordant nor discordant) of two equally long sequences; nan for fewer than 2 or when
    one sequence is constant."""
    n = len(a)
    if n != len(b) or n < 2:
        return math.nan
    conc = disc = ties_a = ties_b = 0
    for i in range(n):
        for j in range(i + 1, n):
            da, db = a[i] - a[j], b[i] - b[j]
            if da == 0 and db == 0:
                continue
            if da == 0:
                ties_a += 1
            elif db == 0:
                ties_b += 1
            elif (da > 0) == (db > 0):
                conc += 1
            else:
                disc += 1
    denom = math.sqrt((conc + disc + ties_a) * (conc + disc + ties_b))
    return (conc - disc) / denom if denom else math.nan


def quantile(xs: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``xs``, interpolated linearly between order statistics
    (numpy's default); nan when empty."""
    if not xs:
        return math.nan
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def accuracy(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Predicted vs measured, over rows with both latencies: Spearman's and Kendall's rank
    correlations of latency; the median, 90th percentile and worst |relative error| of
    latency and of peak memory; the median signed latency error (negative: predicted
    faster); and the top-1 regret, the measured latency of the configuration predicted
    fastest over the fastest measured, minus 1 (0: the prediction picked the best; ties in
    prediction go to the row listed first). Give it the rows of one batch size: pooled over
    batch sizes, the rank correlation mostly measures that bigger batches take longer."""
    both = [r for r in rows if _f(r.get("latency_s")) > 0
            and _f(r.get("measured_latency_s")) > 0]
    pred = [_f(r["latency_s"]) for r in both]
    meas = [_f(r["measured_latency_s"]) for r in both]
    lat_err = sorted(abs(p - m) / m for p, m in zip(pred, meas))
    mem = [(_f(r.get("peak_memory_bytes")), _f(r.get("measured_peak_memory_bytes")))
           for r in both]
    mem_err = sorted(abs(p - m) / m for p, m in mem if m > 0 and p > 0)
    regret = math.nan
    if both:
        top = min(range(len(both)), key=lambda i: pred[i])
        regret = meas[top] / min(meas) - 1.0
    return {"n": float(len(both)), "spearman": spearman(pred, meas),
            "kendall": kendall(pred, meas),
            "median_latency_error": quantile(lat_err, 0.5),
            "p90_latency_error": quantile(lat_err, 0.9),
            "worst_latency_error": lat_err[-1] if lat_err else math.nan,
            "median_signed_latency_error": quantile([(p - m) / m for p, m in
                                                      zip(pred, meas)], 0.5),
            "top1_regret": regret,
            "median_memory_error": quantile(mem_err, 0.5),
            "p90_memory_error": quantile(mem_err, 0.9),
            "worst_memory_error": mem_err[-1] if mem_err else math.nan}


def profile_mismatch(hardware: str | None, devices: Sequence[str]) -> str | None:
    """Why measurements on ``devices`` cannot check predictions for ``hardware``, or ``None``.

    Every shipped profile describes GPUs; runs on the CPU (gloo without GPUs) time other
    hardware, so their rank correlation and errors say nothing about the simulator."""
    cpu = sorted({d for d in devices if d.lower().startswith("cpu")})
    if not cpu or (hardware is not None and "cpu" in str(hardware).lower()):
        return None
    prof = f"the profile {hardware}" if hardware else "the hardware profile"
    return (f"the runs were measured on {', '.join(cpu)}, which {prof} does not describe: "
            "the figures below compare CPU times with GPU predictions and say nothing about "
            "the simulator's accuracy (run on the profile's GPUs with --backend nccl, or "
            "calibrate a profile of these devices with `distir calibrate`)")


def run_top(rows: Sequence[dict[str, Any]], workload: Workload, k: int, *,
            out: str | None = None, backend: str | None = None,
            hardware: Any = None, cuda_graph: bool = False) -> list[dict[str, Any]]:
    """Run the ``k`` best fitting rows for real (``cuda_graph``: each step replayed as a
    CUDA graph); add measured columns to ``out``. When the measuring devices are not those
    ``hardware`` (a profile name or ``Hardware``) describes, says so beside the figures."""
    from distir.backend.timing import HOST_BOUND
    from grid_search.report import best_rows
    from grid_search.search import COLUMNS, read_rows

    best = best_rows(rows, k)
    configs = [Config(r["model"], int(r["batch_size"]), int(r["dp"]), int(r["tp"]),
                      int(r["pp"]), int(r["microbatches"]), r["schedule"]) for r in best]
    base = read_rows(out) if out else list(rows)
    measured: dict[Any, dict[str, Any]] = {}

    def merge() -> list[dict[str, Any]]:
        merged = []
        for r in base:
            m = measured.get(config_key(r), {})
            if m:
                m = {**m, "measured_reason": m.get("reason", "")}
            merged.append({**r, **{c: m.get(c, r.get(c, "")) for c in MEASURED_COLUMNS}})
        if out:  # rewritten after every run (whole, then renamed): an interrupted or
            # killed search keeps every configuration measured before it stopped
            tmp = f"{out}.tmp"
            with open(tmp, "w", newline="", encoding="utf-8") as f:
                w = csv.DictWriter(f, COLUMNS + MEASURED_COLUMNS, extrasaction="ignore")
                w.writeheader()
                w.writerows(merged)
            os.replace(tmp, out)
        return merged

    for m in iter_measure(workload, configs, backend=backend, hardware=hardware,
                          cuda_graph=cuda_graph, host_cost=not cuda_graph):
        measured[config_key(m)] = m
        merge()
    merged = merge()
    def pct(x: float) -> str:
        return "n/a" if math.isnan(x) else f"{x * 100:.1f}%"

    mismatch = profile_mismatch(getattr(hardware, "name", hardware),
                                [str(m.get("measured_device", ""))
                                           for m in measured.values()])
    if mismatch:
        print(f"\nwarning: {mismatch}")
    ok = [r for r in merged if r.get("measured_status") == "ok"]
    print(f"\nMeasured the top {len(configs)} configurations; per batch size, predicted vs "
          "measured (n/a: fewer than 2 runs, or no CUDA memory figures on the CPU):")
    for b in sorted({int(r["batch_size"]) for r in ok}):
        acc = accuracy([r for r in ok if int(r["batch_size"]) == b])
        print(f"  batch {b}: {int(acc['n'])} run(s), Spearman's rank correlation of latency "
              f"{acc['spearman']:.3f}, latency error median {pct(acc['median_latency_error'])} "
              f"(worst {pct(acc['worst_latency_error'])}), peak-memory error median "
              f"{pct(acc['median_memory_error'])} (worst {pct(acc['worst_memory_error'])})")
    paced = [r for r in ok if r.get("measured_host_share", "") != ""
             and float(r["measured_host_share"]) >= HOST_BOUND]
    if paced:
        print("  paced by their hosts (the busiest host's own cost over the step): "
              + ", ".join(f"D{r['dp']}/T{r['tp']}/P{r['pp']}/K{r['microbatches']} batch "
                          f"{r['batch_size']} ({float(r['measured_host_share']):.0%})"
                          for r in paced)
              + "; their time is this machine's host speed, not the configuration's: rank "
              "them replayed (--cuda-graph)")
    slowed = [(r, rep) for r in ok if (rep := clock_report(r)) is not None and rep.slowed]
    if slowed:
        print("  measured on slowed GPUs (the card's protection, or a busy clock below "
              "70% of its maximum): "
              + ", ".join(f"D{r['dp']}/T{r['tp']}/P{r['pp']}/K{r['microbatches']} batch "
                          f"{r['batch_size']} ({rep.text()})" for r, rep in slowed)
              + "; their time is this lease's, not the configuration's: measure them again")
    failed = [r for r in merged if r.get("measured_status") not in ("", None, "ok")]
    for r in failed:
        print(f"  not measured: D{r['dp']}/T{r['tp']}/P{r['pp']}/K{r['microbatches']} batch "
              f"{r['batch_size']}: {r['measured_status']}: {r.get('measured_reason') or '?'}")
    return merged
