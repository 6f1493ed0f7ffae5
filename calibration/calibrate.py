"""The calibration driver: measure, fit, write a hardware profile and its measurements.

``calibrate(output, ...)`` runs the microbenchmarks of ``bench``, ``bench_nn`` and
``bench_train`` (one device: matmuls, elementwise kernels, broadcasting ones
(``bench_broadcast``); attention's batched matmuls,
softmax, layer norm, GELU, permuted copies; the training kernels through the backend's
lowerings: convolutions forward and backward, normalization and softmax gradients,
cross entropy, Adam, scatter-add, reductions, pools; ``bench_matmul_grad``'s products with a
transposed operand and repeated-index scatter-adds) and ``comm`` (every local GPU, or
gloo processes on a CPU), fits them (``fit``), and writes

- ``OUTPUT`` (``NAME.json``): the profile, in the format of ``distir.analysis.hardware``;
- ``NAME.measurements.csv`` beside it: every measurement (a first comment line holds the
  machine's description), from which ``--fit-only`` refits without a device;
- ``NAME.report.md`` beside it: the fit-quality table that ``calibration/README.md`` quotes.

The profile's analytic figures are the measured ones where measured (peak FLOP/s per dtype:
the fastest matmul; memory bandwidth: the median rate of the elementwise kernels moving at
least 256 MiB, beyond any cache; launch overhead: the smallest elementwise kernels; link
bandwidth and latency per group size: an alpha-beta fit of allreduce), else the base
profile's (datasheet) figures. Progress goes to standard error.
"""

from __future__ import annotations

import csv
import datetime
import json
import math
import os
import platform
import re
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from distir.analysis.hardware import (
    FORMAT,
    Hardware,
    LinkSpec,
    collective_factors,
    load_hardware,
)
from distir.errors import ConfigError

__all__ = ["calibrate", "run_from_args", "build_profile", "read_measurements",
           "write_measurements", "default_name", "dumps_profile"]

_CSV_TAG = "# distir-calibration "


class _Log:
    """Progress lines on standard error, with the elapsed time."""

    def __init__(self, quiet: bool = False) -> None:
        self.t0 = time.perf_counter()
        self.quiet = quiet

    def __call__(self, msg: str) -> None:
        if not self.quiet:
            print(f"[calibrate {time.perf_counter() - self.t0:6.1f}s] {msg}", file=sys.stderr,
                  flush=True)


def default_name(device_name: str) -> str:
    """A profile name for a device: ``h100-sxm``, ``h200-sxm``, else a slug."""
    low = device_name.lower()
    for chip in ("h100", "h200"):
        if chip in low:
            return f"{chip}-sxm" if "pcie" not in low else f"{chip}-pcie"
    slug = re.sub(r"[^a-z0-9]+", "-", low).strip("-")
    return slug or "local"


def _machine(use_cuda: bool) -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"torch": torch.__version__, "python": platform.python_version(),
                            "host": platform.node()}
    if use_cuda:
        props = torch.cuda.get_device_properties(0)
        info.update(device_name=torch.cuda.get_device_name(0),
                    memory_bytes=int(props.total_memory), gpus=torch.cuda.device_count(),
                    cuda=torch.version.cuda, kind="cuda",
                    float32_matmul_precision=torch.get_float32_matmul_precision())
    else:
        try:
            mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            mem = 0
        info.update(device_name=f"cpu ({platform.machine()}, {os.cpu_count()} cores)",
                    memory_bytes=int(mem), gpus=0, kind="cpu")
    return info


def write_measurements(path: Path, rows: Sequence[dict[str, Any]], meta: dict[str, Any],
                       ) -> None:
    from calibration.bench import Row

    with open(path, "w", newline="", encoding="utf-8") as f:
        f.write(_CSV_TAG + json.dumps(meta) + "\n")
        w = csv.DictWriter(f, fieldnames=list(Row.FIELDS))
        w.writeheader()
        for r in rows:
            w.writerow({k: r[k] for k in Row.FIELDS})


def read_measurements(path: str | Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The rows and machine description of a measurements CSV."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"measurements file {p} does not exist")
    with open(p, encoding="utf-8") as f:
        first = f.readline()
        meta: dict[str, Any] = {}
        if first.startswith(_CSV_TAG):
            meta = json.loads(first[len(_CSV_TAG):])
        else:
            f.seek(0)
        rows = []
        for r in csv.DictReader(f):
            try:
                rows.append({**r, "m": int(r["m"]), "n": int(r["n"]), "k": int(r["k"]),
                             "bytes": int(r["bytes"]), "flops": float(r["flops"]),
                             "group_size": int(r["group_size"]),
                             "seconds": float(r["seconds"]), "reps": int(r["reps"])})
            except (KeyError, ValueError) as e:
                raise ConfigError(f"{p}: malformed measurements row ({e}); expected the "
                                  f"columns of calibration.bench.Row") from None
    return rows, meta


def _alpha_beta(rows: Sequence[dict[str, Any]], launch: float, g: int,
                ) -> LinkSpec | None:
    """Link bandwidth and latency of a group size from its allreduce times."""
    import numpy as np
    from sklearn.linear_model import LinearRegression

    rs = [r for r in rows if r["family"] == "allreduce" and int(r["group_size"]) == g
          and r["seconds"] > 0]
    if len(rs) < 3:
        return None
    x = np.array([[float(r["bytes"])] for r in rs])
    y = np.array([r["seconds"] for r in rs])
    reg = LinearRegression(positive=True).fit(x, y, sample_weight=1.0 / y**2)
    slope = float(reg.coef_[0])
    steps, volume = collective_factors("allreduce", g)
    if slope <= 0:
        return None
    return LinkSpec(g, volume / slope, max(float(reg.intercept_) - launch, 0.0) / steps)


def build_profile(name: str, base: Hardware | None, machine: dict[str, Any],
                  rows: Sequence[dict[str, Any]], reports: Sequence[Any],
                  extra: dict[str, Any]) -> dict[str, Any]:
    """The profile JSON object (see the module docstring for where each figure comes
    from); checked by ``Hardware.from_json``."""
    peak = dict(base.peak_flops) if base is not None else {}
    for dt in sorted({r["dtype"] for r in rows if r["family"] == "matmul"}):
        peak[dt] = max(r["flops"] / r["seconds"] for r in rows
                       if r["family"] == "matmul" and r["dtype"] == dt and r["seconds"] > 0)
    ew = [r for r in rows if r["family"] == "elementwise" and r["seconds"] > 0]
    if ew:
        # DRAM bandwidth: kernels moving well beyond any cache (>= 256 MiB), else the best.
        big = [r["bytes"] / r["seconds"] for r in ew if r["bytes"] >= 1 << 28]
        bandwidth = statistics.median(big) if big else max(r["bytes"] / r["seconds"]
                                                          for r in ew)
        smallest = min(r["m"] for r in ew)
        launch = statistics.median(r["seconds"] for r in ew if r["m"] == smallest)
    elif base is not None:
        bandwidth, launch = base.memory_bandwidth, base.launch_overhead
    else:
        raise ConfigError("no elementwise measurements and no base profile: cannot set the "
                          "memory bandwidth and launch overhead")
    sizes = sorted({int(r["group_size"]) for r in rows if r["family"] == "allreduce"})
    links = [s for s in (_alpha_beta(rows, launch, g) for g in sizes) if s is not None]
    if not links:
        links = list(base.intra_node) if base is not None else [LinkSpec(2, 1e10, 1e-5)]
    inter = list(base.inter_node) if base is not None else list(links)
    per_node = base.devices_per_node if base is not None else max(int(machine.get("gpus") or
                                                                      2), 2)
    memory = int(machine.get("memory_bytes") or (base.memory_bytes if base else 0))
    fits: dict[str, dict[str, Any]] = {}
    for rep in reports:
        fits.setdefault(rep.family, {})[rep.key] = rep.model.to_json()
    comment = []
    if base is not None:
        src = load_hardware_doc(base)
        comment = [f"Base profile {base.name}: " + c for c in _as_list(src.get("comment"))]
    comment.append(
        f"Calibrated by distir calibrate on {machine.get('device_name')} "
        f"(x{max(int(machine.get('gpus') or 1), 1)}), torch {machine.get('torch')}: "
        "peak_flops of the measured dtypes is the fastest measured matmul, memory_bandwidth "
        "the median rate of elementwise kernels moving at least 256 MiB, launch_overhead the "
        "smallest elementwise kernels, "
        "intra_node links an alpha-beta fit of allreduce; other figures come from the base "
        "profile.")
    if machine.get("device_time"):
        comment.append("Compute kernels timed by their device time alone (--device-time: "
                       "the GPU held while the host enqueued them), as a step replayed as a "
                       "CUDA graph runs them: simulate --cuda-graph steps with this profile.")
    doc = {
        "format": FORMAT,
        "name": name,
        "description": f"{machine.get('device_name')}, calibrated "
                       f"{extra.get('date', '')} by distir calibrate"
                       + (f" on the base of {base.name}" if base is not None else ""),
        "calibrated": True,
        "comment": comment,
        "device": {"memory_bytes": memory, "peak_flops": peak,
                   "memory_bandwidth": bandwidth, "launch_overhead": launch,
                   # measured apart (calibration.memory_overhead): kept from the base
                   **({"reserved_bytes": base.reserved_bytes}
                      if base is not None and base.reserved_bytes else {})},
        "interconnect": {
            "devices_per_node": per_node,
            "intra_node": [{"group_size": s.group_size, "bandwidth": s.bandwidth,
                            "latency": s.latency} for s in links],
            "inter_node": [{"group_size": s.group_size, "bandwidth": s.bandwidth,
                            "latency": s.latency} for s in inter]},
        "fits": fits,
        "calibration": {**extra, "machine": machine,
                        "fit_quality": [r.as_dict() for r in reports]},
    }
    Hardware.from_json(doc, f"calibrated profile {name}")
    return doc


def load_hardware_doc(hw: Hardware) -> dict[str, Any]:
    """The JSON object a profile was read from (its own serialization if none)."""
    if hw.source and Path(hw.source).is_file():
        return dict(json.loads(Path(hw.source).read_text(encoding="utf-8")))
    return hw.to_json()


def _depth(x: Any) -> int:
    """Nesting depth of lists (0 for a scalar); dicts count as deep."""
    if isinstance(x, dict):
        return 99
    if isinstance(x, list):
        return 1 + max((_depth(v) for v in x), default=0)
    return 0


PROFILE_DIGITS = 8
"""Significant digits a tree's leaf values are written with (estimates good to a few
percent; the deep trees of a profile spliced many times took 6.6 MB at full precision).
A tree's thresholds keep every digit: they lie on the measured features' own values, and
a rounded one would send a feature equal to it down the other branch."""


def _rounded(x: Any) -> Any:
    """``x`` with the leaf values of tree nodes (``[feature, threshold, left, right,
    value]``, ``feature`` -1 at a leaf) rounded to ``PROFILE_DIGITS``."""
    if isinstance(x, list):
        if len(x) == 5 and x[0] == -1 and isinstance(x[4], float) and math.isfinite(x[4]):
            return [*x[:4], float(f"{x[4]:.{PROFILE_DIGITS}g}")]
        return [_rounded(v) for v in x]
    return x


def dumps_profile(obj: Any, indent: int = 0) -> str:
    """JSON with objects indented and lists of scalars (and of lists of scalars: the nodes
    of a tree) on one line, so that fitted trees stay compact but readable; a tree's leaf
    values to ``PROFILE_DIGITS`` significant digits."""
    pad = "  " * indent
    if isinstance(obj, list):
        obj = _rounded(obj)
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [f"{pad}  {json.dumps(k)}: {dumps_profile(v, indent + 1)}"
                 for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, list) and (_depth(obj) > 2 or (
            any(isinstance(v, str) for v in obj) and len(json.dumps(obj)) > 90)):
        items = [f"{pad}  {dumps_profile(v, indent + 1)}" for v in obj]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return json.dumps(obj)


def _as_list(x: Any) -> list[str]:
    if x is None:
        return []
    return [str(v) for v in x] if isinstance(x, list) else [str(x)]


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def format_report(name: str, machine: dict[str, Any], reports: Sequence[Any],
                  rows: Sequence[dict[str, Any]], extra: dict[str, Any]) -> str:
    """The fit-quality report (markdown), with the headline errors and device time."""
    from calibration.fit import pooled

    n_mm, mm = pooled(reports, rows, {"matmul"})
    n_bmm, bmm = pooled(reports, rows, {"bmm"})
    n_un, un = pooled(reports, rows, {"matmul_unaligned"})
    comm_fams = {"allreduce", "allgather", "reduce_scatter", "broadcast", "send"}
    n_cc, cc = pooled(reports, rows, comm_fams)
    lines = [
        f"## Profile `{name}`",
        "",
        f"- device: {machine.get('device_name')} x{max(int(machine.get('gpus') or 0), 1)}"
        f" ({machine.get('kind')}), torch {machine.get('torch')}"
        + (f", CUDA {machine['cuda']}" if machine.get("cuda") else ""),
        f"- date: {extra.get('date')}; command: `{extra.get('command')}`"
        + (f" (measured with `{machine['command']}`)"
           if machine.get("command") and machine.get("command") != extra.get("command")
           else ""),
        f"- measurements: {len(rows)} ({sum(r['split'] == 'test' for r in rows)} held out)",
        f"- matmuls of at least 1 GFLOP, held out: median absolute error {_pct(mm)} "
        f"over {n_mm} shapes",
        f"- batched (attention) matmuls of at least 1 GFLOP, held out: median absolute "
        f"error {_pct(bmm)} over {n_bmm} shapes",
        f"- matmuls of at least 1 GFLOP with n or k off 8-element alignment, held out: "
        f"median absolute error {_pct(un)} over {n_un} shapes",
        f"- collectives of at least 1 MiB, held out: median absolute error {_pct(cc)} "
        f"over {n_cc} sizes",
        f"- device time: {extra.get('gpu_minutes', 0.0):.2f} GPU-minutes "
        f"({extra.get('wall_s', 0.0):.0f} s wall)",
        "",
        "| family | key | model | train | held out | R² (log t) | median error "
        "| large held out | median error (large) |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in reports:
        r2 = "n/a" if r.r2_log is None else f"{r.r2_log:.4f}"
        lines.append(f"| {r.family} | {r.key} | {r.model_name} | {r.n_train} | {r.n_test} "
                     f"| {r2} | {_pct(r.median_ape)} | {r.n_large} "
                     f"| {_pct(r.median_ape_large)} |")
    lines.append("")
    lines.append("Large: matmuls of at least 1 GFLOP; other kernels and collectives of "
                 "at least 1 MiB. Errors are |predicted - measured| / measured on held-out "
                 "configurations, predicted by the shipped model.")
    return "\n".join(lines) + "\n"


def calibrate(output: str | None = None, *, name: str | None = None, quick: bool = False,
              base: str | None = None, devices: int | None = None, cpu: bool = False,
              cpu_procs: int = 2, comm: bool = True, nn: bool = True,
              shapes: int | None = None,
              seed: int = 0, fit_only: str | Sequence[str] | None = None,
              measure_only: bool = False, device_time: bool = False,
              families: Sequence[str] | None = None, dtypes: Sequence[str] | None = None,
              command: str = "", log: Callable[[str], None] | None = None,
              off_grid: bool = False, pointwise_conv1d: bool = False,
              ) -> dict[str, Any] | None:
    """Measure (unless ``fit_only`` names a measurements CSV), fit (unless
    ``measure_only``), write the profile and its companions; return the profile object
    (``None`` with ``measure_only``). See the module docstring. ``device_time`` times
    every compute kernel on a GPU by its device time alone (``DeviceTimer``: the stream
    held while the host enqueues the calls), as a step replayed as a CUDA graph runs its
    kernels, rather than back to back from the host (where a small kernel's time is the
    host's issue rate): a profile for ``--cuda-graph`` steps. ``families`` measures only
    those compute families (the CSV's ``family`` names), ``dtypes`` every family in those
    dtypes; ``fit_only`` may name several CSVs, whose rows are pooled (the machine
    description is the first's): a full calibration completed by a later one of some
    families in another dtype. ``off_grid`` draws the products' shapes (``matmul``,
    ``matmul_tn``, ``matmul_nt``) off the grid of powers of two and their midpoints
    (``calibration.bench.off_grid_dims``): measured with ``families`` and pooled with a
    full calibration's CSV by ``fit_only``, it completes the fits where real models'
    sizes fall between the grid's. ``pointwise_conv1d`` draws the 1-D convolutions' shapes
    from kernel-1 projections alone (``bench_train.pointwise_conv1d_shapes``), to pool
    the same way."""
    log = log or _Log()
    t_start = time.perf_counter()
    gpu_s = 0.0
    if fit_only is not None:
        paths = [fit_only] if isinstance(fit_only, (str, Path)) else list(fit_only)
        rows, machine = read_measurements(paths[0])
        gpu_s = float(machine.pop("gpu_seconds", 0.0))
        for more in paths[1:]:
            extra_rows, meta = read_measurements(more)
            if meta.get("device_name") != machine.get("device_name") or \
                    bool(meta.get("device_time")) != bool(machine.get("device_time")):
                raise ConfigError(f"{more}: measured on {meta.get('device_name')!r} "
                                  f"(device time: {bool(meta.get('device_time'))}), "
                                  f"{paths[0]} on {machine.get('device_name')!r} (device "
                                  f"time: {bool(machine.get('device_time'))}); pool only "
                                  "measurements of one kind of device, timed alike")
            rows += extra_rows
            gpu_s += float(meta.get("gpu_seconds", 0.0))
        fit_only = paths[0]
        log(f"read {len(rows)} measurements from {', '.join(map(str, paths))}")
    else:
        _family_filter(families)  # bad options fail before anything is measured
        bad = sorted(set(dtypes or ()) - {"Float32", "Float16", "BFloat16"})
        if bad:
            raise ConfigError(f"--dtypes: unknown {', '.join(bad)}; choose among Float32, "
                              "Float16, BFloat16")
        rows, machine, gpu_s = _measure(quick=quick, devices=devices, cpu=cpu,
                                        cpu_procs=cpu_procs, comm=comm, nn=nn, shapes=shapes,
                                        seed=seed, log=log, device_time=device_time,
                                        families=families, dtypes_arg=dtypes,
                                        off_grid=off_grid, pointwise_conv1d=pointwise_conv1d)
        machine["wall_s"] = time.perf_counter() - t_start
        machine["command"] = command or "distir calibrate"
    name = name or (Path(output).stem if output else default_name(machine["device_name"]))
    out = Path(output) if output else Path(f"{name}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    stem = out.with_suffix("")
    csv_path = stem.with_name(stem.name + ".measurements.csv")
    report_path = stem.with_name(stem.name + ".report.md")
    if fit_only is None:  # first, so that a failed fit leaves the measurements
        write_measurements(csv_path, rows, {**machine, "gpu_seconds": gpu_s})
        log(f"wrote {csv_path}")
        if measure_only:
            log(f"device time: {gpu_s / 60.0:.2f} GPU-minutes; fit with: distir calibrate "
                f"--fit-only {csv_path} -o {out}")
            return None
    base_hw = None
    if base is None and machine.get("kind") == "cuda":
        low = str(machine.get("device_name", "")).lower()
        if "h100" in low or "h200" in low:
            base = "h100-sxm-datasheet"
    if base is not None:
        base_hw = load_hardware(base)
    from calibration.fit import fit_rows

    log("fitting")
    reports = fit_rows(rows, log)
    wall = time.perf_counter() - t_start
    date = datetime.date.today().isoformat()
    extra = {"date": date, "command": command or "distir calibrate",
             "gpu_minutes": gpu_s / 60.0, "wall_s": float(machine.get("wall_s", wall)),
             "measurements": len(rows), "quick": quick,
             "device_time": bool(machine.get("device_time", False))}
    doc = build_profile(name, base_hw, machine, rows, reports, extra)
    if fit_only is not None and Path(fit_only).resolve() != csv_path.resolve():
        write_measurements(csv_path, rows, {**machine, "gpu_seconds": gpu_s})
    out.write_text(dumps_profile(doc) + "\n", encoding="utf-8")
    report = format_report(name, machine, reports, rows, extra)
    report_path.write_text(report, encoding="utf-8")
    log(f"wrote {out} and {report_path.name}")
    sys.stdout.write(report)
    return doc


def _measure(*, quick: bool, devices: int | None, cpu: bool, cpu_procs: int, comm: bool,
             shapes: int | None, seed: int, log: Callable[[str], None], nn: bool = True,
             device_time: bool = False, families: Sequence[str] | None = None,
             dtypes_arg: Sequence[str] | None = None, off_grid: bool = False,
             pointwise_conv1d: bool = False,
             ) -> tuple[list[dict[str, Any]], dict[str, Any], float]:
    try:
        import torch
    except ModuleNotFoundError:
        raise ConfigError("calibration needs PyTorch: pip install torch") from None
    from calibration import bench
    from calibration.comm import bench_collectives, message_sizes

    use_cuda = torch.cuda.is_available() and not cpu
    machine = _machine(use_cuda)
    machine["device_time"] = bool(device_time and use_cuda)
    device = torch.device("cuda", 0) if use_cuda else torch.device("cpu")
    log(f"device: {machine['device_name']}" + (f" ({machine['gpus']} GPUs)" if use_cuda else ""))
    timer: Any
    if use_cuda:
        timer = bench.Timer(device, target_s=0.02, trials=3)
        if device_time:  # every compute family as a replayed graph runs it
            from calibration.bench_train import DeviceTimer

            timer = DeviceTimer(timer)
            log("compute kernels timed by their device time alone (--device-time)")
        dtypes = ["Float32", "Float16", "BFloat16"]
        ew_dtypes = ["Float32", "BFloat16"]
        nn_dtypes = ["Float32", "Float16"]
    else:
        torch.set_num_threads(max(1, (os.cpu_count() or 2) // max(cpu_procs, 1)))
        timer = bench.Timer(device, target_s=0.002 if quick else 0.01, trials=3)
        dtypes = ["Float32"]
        ew_dtypes = ["Float32"]
        nn_dtypes = ["Float32"]
    train_dtypes = ["Float32"]
    if dtypes_arg is not None:
        dtypes = ew_dtypes = nn_dtypes = train_dtypes = list(dtypes_arg)
    want = _family_filter(families)
    n_shapes = shapes or (24 if quick else (300 if use_cuda else 80))
    grid = bench.matmul_shapes(quick, use_cuda, n_shapes, seed, off_grid=off_grid)
    rows: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    if want("matmul"):
        log(f"matmul: {len(grid)} shapes x {len(dtypes)} dtypes")
        rows.extend(r.as_dict() for r in bench.bench_matmuls(device, dtypes, grid, timer,
                                                             log))
    if want("matmul_unaligned"):
        ugrid = bench.unaligned_matmul_shapes(quick, use_cuda, 8 if quick else
                                              (60 if use_cuda else 16), seed)
        log(f"matmul_unaligned: {len(ugrid)} shapes x {len(dtypes)} dtypes")
        rows.extend(r.as_dict() for r in bench.bench_matmuls(
            device, dtypes, ugrid, timer, log, family="matmul_unaligned"))
    if want("elementwise"):
        sizes = bench.elementwise_sizes(quick, use_cuda)
        log(f"elementwise: {len(sizes)} sizes x 2 ops x {len(ew_dtypes)} dtypes")
        rows.extend(r.as_dict() for r in bench.bench_elementwise(device, ew_dtypes, sizes,
                                                                 timer, log))
    if want("elementwise_bcast"):
        from calibration.bench_broadcast import bench_broadcast, broadcast_sizes

        rows.extend(r.as_dict() for r in bench_broadcast(device, dtypes, broadcast_sizes(
            quick, use_cuda), timer, log))
    if nn:
        from calibration import bench_nn

        if use_cuda:
            torch.cuda.empty_cache()
        if want("bmm"):
            from calibration.bench_matmul_grad import small_batched_shapes

            att = bench_nn.attention_shapes(quick, use_cuda)
            small = small_batched_shapes(quick, use_cuda, seed=seed)
            log(f"bmm: {len(att)} attention shapes x 2 products and {len(small)} small "
                f"products x {len(dtypes)} dtypes")
            rows.extend(r.as_dict() for r in bench_nn.bench_bmm(device, dtypes, att, timer,
                                                                log, small))
        kfams = tuple(f for f in NN_KERNEL_FAMILIES if want(f))
        if kfams:
            ksizes = bench_nn.kernel_sizes(quick, use_cuda)
            log(f"{', '.join(kfams)}: {len(ksizes)} sizes x {len(nn_dtypes)} dtypes")
            rows.extend(r.as_dict() for r in bench_nn.bench_kernels(
                device, nn_dtypes, ksizes, timer, log, families=kfams))
        from calibration import bench_train

        if use_cuda:
            torch.cuda.empty_cache()
        tfams = tuple(f for f in bench_train.TRAIN_FAMILIES if want(f))
        if tfams:
            tsizes = (bench.size_ladder(10, 14) if quick else
                      bench.size_ladder(8, 28) if use_cuda else bench.size_ladder(12, 18))
            log(f"training kernels: {len(tsizes)} sizes x {len(tfams)} families x "
                f"{len(train_dtypes)} dtypes")
            rows.extend(r.as_dict() for r in bench_train.bench_train_kernels(
                device, train_dtypes, tsizes, timer, log, families=tfams))
        conv1d = bench_train.pointwise_conv1d_shapes if pointwise_conv1d else \
            bench_train.conv1d_shapes
        for what, fams, draw, nhwc, one_d in (
                ("grouped convolutions", bench_train.GROUPED_CONV_FAMILIES,
                 bench_train.grouped_conv_shapes, False, False),
                ("convolutions", bench_train.CONV_FAMILIES, bench_train.conv_shapes, False,
                 False),
                ("channels-last grouped convolutions", bench_train.NHWC_GROUPED_CONV_FAMILIES,
                 bench_train.grouped_conv_shapes, True, False),
                ("channels-last convolutions", bench_train.NHWC_CONV_FAMILIES,
                 bench_train.conv_shapes, True, False),
                ("1-D convolutions", bench_train.CONV1D_FAMILIES, conv1d, False, True)):
            if any(want(f) for f in fams):
                convs = draw(quick, use_cuda, 8 if quick else (240 if use_cuda else 16), seed)
                log(f"{what}: {len(convs)} shapes x 3 (forward, dgrad, wgrad), "
                    f"{len(train_dtypes)} dtypes")
                rows.extend(r.as_dict() for r in bench_train.bench_convs(
                    device, train_dtypes, convs, timer, log, channels_last=nhwc,
                    one_d=one_d))
        from calibration.bench_matmul_grad import bench_all

        if use_cuda:
            torch.cuda.empty_cache()
        if any(want(f) for f in MATMUL_GRAD_FAMILIES):
            log("products with a transposed operand (matmul_tn, matmul_nt, bmm_nt, bmm_tn) "
                f"and repeated-index scatter-adds, {len(dtypes)} dtypes")
            rows.extend(r.as_dict() for r in bench_all(device, dtypes, quick, timer, log,
                                                       off_grid=off_grid, seed=seed))
    if use_cuda:
        torch.cuda.empty_cache()
    gpu_s = (time.perf_counter() - t0) if use_cuda else 0.0
    world = (min(devices or machine["gpus"], machine["gpus"]) if use_cuda else cpu_procs)
    machine["world"] = world
    if comm and world >= 2 and (families is None or "collectives" in families):
        backend = "nccl" if use_cuda else "gloo"
        msizes = message_sizes(quick, use_cuda)
        graph = bool(device_time and use_cuda)
        log(f"collectives: {world} processes ({backend}), {len(msizes)} sizes"
            + (", each replayed as a CUDA graph (--device-time)" if graph else ""))
        t1 = time.perf_counter()
        try:
            rows.extend(bench_collectives(world, backend, msizes,
                                          target_s=0.01 if use_cuda else 0.002,
                                          cuda_graph=graph))
        except Exception as e:  # noqa: BLE001 - keep the compute measurements
            log(f"collectives failed ({type(e).__name__}: {e}); the profile keeps the base "
                "profile's links")
        if use_cuda:
            gpu_s += (time.perf_counter() - t1) * world
    else:
        log("collectives: skipped (" + ("--no-comm" if not comm else
                                        f"{world} device{'s' * (world != 1)}" if world < 2
                                        else "--families without collectives") + ")")
    if not all(math.isfinite(r["seconds"]) for r in rows):
        raise ConfigError("a measurement is not finite; rerun the calibration")
    return rows, machine, gpu_s


NN_KERNEL_FAMILIES = ("softmax", "layernorm", "gelu", "copy")
"""The families of ``bench_nn.bench_kernels``."""
MATMUL_GRAD_FAMILIES = ("matmul_tn", "matmul_nt", "bmm_nt", "bmm_tn", "scatter_add_repeated")
"""The families of ``bench_matmul_grad.bench_all``."""


def _family_filter(families: Sequence[str] | None) -> Callable[[str], bool]:
    """Whether a family is to be measured (all without ``families``); an unknown name is
    refused in one line."""
    if families is None:
        return lambda f: True
    from calibration.bench_train import (
        CONV1D_FAMILIES,
        CONV_FAMILIES,
        GROUPED_CONV_FAMILIES,
        NHWC_CONV_FAMILIES,
        NHWC_GROUPED_CONV_FAMILIES,
        TRAIN_FAMILIES,
    )

    known = {"collectives", "matmul", "matmul_unaligned", "elementwise", "elementwise_bcast",
             "bmm",
             *NN_KERNEL_FAMILIES, *TRAIN_FAMILIES, *CONV_FAMILIES, *GROUPED_CONV_FAMILIES,
             *NHWC_CONV_FAMILIES, *NHWC_GROUPED_CONV_FAMILIES, *CONV1D_FAMILIES,
             *MATMUL_GRAD_FAMILIES}
    bad = sorted(set(families) - known)
    if bad:
        raise ConfigError(f"--families: unknown {', '.join(bad)}; choose among "
                          f"{', '.join(sorted(known))}")
    chosen = set(families)
    return chosen.__contains__


def run_from_args(args: Any) -> int:
    """``distir calibrate`` / ``python -m calibration`` with parsed arguments."""
    calibrate(args.output, name=args.name, quick=args.quick, base=args.base,
              devices=args.devices, cpu=args.cpu, cpu_procs=args.cpu_procs,
              comm=not args.no_comm, shapes=args.shapes, seed=args.seed,
              fit_only=args.fit_only, measure_only=args.measure_only,
              device_time=getattr(args, "device_time", False),
              families=getattr(args, "families", None), dtypes=getattr(args, "dtypes", None),
              off_grid=getattr(args, "off_grid", False),
              pointwise_conv1d=getattr(args, "pointwise_conv1d", False),
              command=" ".join([getattr(args, "prog", "distir calibrate"),
                                *(shlex.quote(a) for a in getattr(args, "argv", []))]))
    return 0
