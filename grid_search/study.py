"""The accuracy study: measure configurations on real GPUs, then compare with the simulator.

On the GPU machine (no simulation needed there)::

    python -m grid_search.study measure --model mlp-1b --dtype Float16 \\
        --batch-sizes 1024 4096 16384 --max-devices 2 -o measured.csv

Then anywhere, with a (calibrated) hardware profile::

    python -m grid_search.study compare measured.csv --hardware h100-sxm \\
        -o grid_search/results/NAME

``compare`` writes ``NAME.csv`` (predicted and measured columns side by side) and
``NAME.md`` (per batch size, never pooled: Spearman's rank correlation, median and worst
latency and memory error, and the Table 2 check: the top predicted configuration against
the best measured ones; then the fidelity table of docs/fidelity.md: Kendall's tau, the
90th percentile error, the top-1 regret and the out-of-memory prediction), and says whether
the workload is held out (never used to develop the cost model) or not.

Each measured row records the fingerprint of the distributed program it ran
(``program_fingerprint``); ``compare`` rebuilds every row's program and refuses a row whose
program has changed since (another stage cut, layout or collective), naming it and asking
for it to be measured again (``--skip-stale`` drops such rows instead). Rows measured before
fingerprints were recorded are compared with a warning. Each row is rebuilt by the transform
that wrote it (its ``transform`` column, ``measure --transform``: ``passes``, the default,
is ``distir.transforms.dtp``; rows without the column were measured before ``dtp`` became
the spmd passes' composition and are rebuilt by ``distir.transforms.tower``).

``explain`` runs one configuration with per-op profiling and writes ``distir explain``'s
comparison with the simulation (docs/fidelity.md).

``measure --memory-check`` runs, instead of the whole space, the configurations whose
predicted peak memory (on ``--hardware``) lies within ``--margin`` of the capacity (the
profile's, or ``--memory-limit``, which then caps every run's allocator), nearest first, as
many above as below: predicted fits against real out-of-memory runs.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import os
import platform
import sys
from typing import Any

from distir.errors import ConfigError
from grid_search.models import workload
from grid_search.real import CLOCK_COLUMNS, config_key
from grid_search.space import enumerate_space, powers_of_two

DEVELOPMENT = {("mlp-1b", "Float16"), ("gpt2-1.6b", "Float16"), ("gpt2-24-1024-16", "Float16"),
               ("gpt2-350m", "Float16"), ("gpt2-350m-train", "Float16"),
               ("gpt2-16-1536-12", "BFloat16"), ("gpt2-16-1536-12-train", "BFloat16")}
"""(model, dtype) of the studies the cost model was developed on (docs/fidelity.md): their
accuracy figures are not held out, at any batch size."""


class StaleMeasurementError(ConfigError):
    """A measured row's program is not the one the transform builds today."""


def _graph(r: dict[str, Any]) -> bool:
    """Whether a measured row's steps were CUDA graph replays (``measure --cuda-graph``)."""
    return (r.get("cuda_graph") or "").strip().lower() == "true"


def repeat_latencies(rows: list[dict[str, str]], paths: list[str],
                     measured: str) -> dict[int, list[float]]:
    """For each row of ``rows`` (by index) measured ``ok``, the latencies of the same
    configuration in the files ``paths`` (other measurements of the same study: another
    launch, session or machine) where it ran there too. A file of another model, a row
    there measured on another program or the other way (eager / CUDA graph replays) than
    here, or a file that cannot be read, is refused in one line; a file that repeats no
    configuration measured here is said in a warning."""
    model = rows[0]["model"]
    index: dict[tuple[str, ...], int] = {}
    for i, r in enumerate(rows):
        if r.get("measured_status") == "ok":
            index.setdefault(config_key(r), i)
    out: dict[int, list[float]] = {}
    for path in paths:
        try:
            with open(path, newline="", encoding="utf-8") as f:
                other = list(csv.DictReader(f))
        except OSError as e:
            raise ConfigError(f"--repeat {path}: {e.strerror}") from None
        except (UnicodeDecodeError, csv.Error) as e:
            raise ConfigError(f"--repeat {path}: not a CSV file of measurements ({e}); give "
                              "the file `study measure` wrote") from None
        matched = 0
        for line, r in enumerate(other, start=2):
            if r.get("model") != model:
                raise ConfigError(f"{path}:{line}: model {r.get('model')!r}, not {model!r} "
                                  f"as in {measured}: --repeat takes measurements of the "
                                  "same study")
            at = index.get(config_key(r))
            if at is None or r.get("measured_status") != "ok":
                continue
            mine = (rows[at].get("program_fingerprint") or "").strip()
            theirs = (r.get("program_fingerprint") or "").strip()
            if mine and theirs and mine != theirs:
                raise ConfigError(f"{path}:{line}: measured on program {theirs}, but "
                                  f"{measured} ran {mine} for this configuration: the "
                                  "measurements are of different programs; measure both "
                                  "with one commit")
            if _graph(r) != _graph(rows[at]):
                raise ConfigError(f"{path}:{line}: measured "
                                  + ("as CUDA graph replays" if _graph(r) else "eagerly")
                                  + f", {measured} the other way: their difference is not a "
                                  "spread; repeat a study with one way of running it")
            try:
                latency = float(r["measured_latency_s"])
            except (KeyError, TypeError, ValueError):
                raise ConfigError(f"{path}:{line}: measured ok but without a latency "
                                  "(measured_latency_s); give the file `study measure` "
                                  "wrote") from None
            out.setdefault(at, []).append(latency)
            matched += 1
        if not matched:
            print(f"warning: --repeat {path}: no configuration measured ok there and in "
                  f"{measured}: it adds no spread", file=sys.stderr)
    return out


def _apart_rows(ok: list[dict[str, Any]], apart: Any, describe: Any,
                unknown: Any) -> list[str]:
    """The rows of a table of configurations reported apart, one per batch size: ``apart``
    picks them, ``describe(picked, n)`` writes their cell, ``unknown`` counts the others
    without the value; then the accuracy on the others (from 3 of them)."""
    from grid_search.real import accuracy

    out = []
    for b in sorted({int(r["batch_size"]) for r in ok}):
        sel = [r for r in ok if int(r["batch_size"]) == b]
        hit = [r for r in sel if apart(r)]
        rest = [r for r in sel if not apart(r)]
        head = (f"| {b} | {describe(hit, len(sel))} | {len(rest)} "
                f"({sum(bool(unknown(r)) for r in rest)}) |")
        if len(rest) < 3:
            out.append(head + " - | - | - |")
            continue
        a = accuracy(rest)
        out.append(head + f" {a['spearman']:.3f} | {_pct(a['median_latency_error'])} / "
                   f"{_pct(a['p90_latency_error'])} / {_pct(a['worst_latency_error'])} "
                   f"| {_pct(a['top1_regret'])} |")
    return out


def _config_name(r: dict[str, Any]) -> str:
    return f"D{r['dp']} T{r['tp']} P{r['pp']} K{r['microbatches']}"


def host_table(rows: list[dict[str, Any]]) -> list[str]:
    """Per batch size, the configurations whose measured step was paced by its hosts
    (``measured_host_share`` from ``HOST_BOUND``: the busiest host's own cost of a step
    over the step's time), and the accuracy on the others, beside the accuracy on all
    (``fidelity_table``), never instead of it."""
    from distir.backend.timing import HOST_BOUND

    ok = [r for r in rows if r.get("measured_status") == "ok" and r.get("latency_s") != ""]
    if not any(r.get("measured_host_share", "") != "" for r in ok):
        return []

    def paced(r: dict[str, Any]) -> bool:
        share = r.get("measured_host_share", "")
        return share != "" and float(share) >= HOST_BOUND

    return [f"Host-paced: a step whose busiest host's own cost (ops issued to an idle device, "
            f"measured after the timed steps) is at least {HOST_BOUND:.0%} of its time. Its "
            "time is the host's speed, which differs between machines of one kind and "
            "between launches (docs/fidelity.md); the accuracy on the other configurations "
            "alone (among them, rows without a measured host cost: replays, memory checks, "
            "older files):", "",
            "| batch | host-paced | the others: configs (without a host cost) | Spearman | "
            "latency error median / p90 / worst | top-1 regret |",
            "|---|---|---|---|---|---|",
            *_apart_rows(ok, paced, lambda hit, n: f"{len(hit)} of {n} ("
                         + (", ".join(map(_config_name, hit)) or "none") + ")",
                         lambda r: r.get("measured_host_share", "") == "")]


def clock_table(rows: list[dict[str, Any]]) -> list[str]:
    """Per batch size, the configurations measured on slowed GPUs (``ClockReport.slowed``:
    the card's own protection, or a busy SM clock below ``SLOW_CLOCK`` of its maximum) and
    the accuracy on the others, beside the accuracy on all (``fidelity_table``), never
    instead of it. Nothing for rows measured without clocks (older files, the CPU)."""
    from distir.backend.clocks import SLOW_CLOCK
    from grid_search.real import clock_report

    ok = [r for r in rows if r.get("measured_status") == "ok" and r.get("latency_s") != ""]
    reports = {id(r): clock_report(r) for r in ok}
    if not any(reports.values()):
        return []

    def slowed(r: dict[str, Any]) -> bool:
        rep = reports[id(r)]
        return rep is not None and rep.slowed

    return [f"Clocks: a step measured on slowed GPUs (a thermal, power-brake or hardware "
            f"slowdown while busy, or a busy SM clock below {SLOW_CLOCK:.0%} of the card's "
            "maximum; `measured_clock_events`, `measured_sm_clock_mhz`) ran at this lease's "
            "clocks, not at those the profile was calibrated at; the accuracy on the other "
            "configurations alone (among them, rows without clocks):", "",
            "| batch | on slowed GPUs | the others: configs (without clocks) | Spearman | "
            "latency error median / p90 / worst | top-1 regret |",
            "|---|---|---|---|---|---|",
            *_apart_rows(ok, slowed, lambda hit, n: f"{len(hit)} of {n}: " + (", ".join(
                f"{_config_name(r)} ({reports[id(r)].text()})" for r in hit) or "none"),
                lambda r: reports[id(r)] is None)]


def repeat_table(rows: list[dict[str, Any]]) -> list[str]:
    """Per batch size, how far the measurements of a configuration differ between the
    launches compared (``measured_spread``: slowest over fastest, minus one), and how many
    configurations' latency errors exceed their own spread (errors within it are the
    measurement's noise, not the model's)."""
    from grid_search.real import quantile

    sel = [r for r in rows if r.get("measured_spread", "") != "" and r.get("latency_s") != ""]
    if not sel:
        return []
    out = ["Each configuration measured again (`--repeat`): the spread is the slowest of its "
           "measurements over the fastest, minus one; a latency error within it is the "
           "measurement's own variation.", "",
           "| batch | configs measured again | spread: median / p90 / worst | errors beyond "
           "their spread |", "|---|---|---|---|"]
    for b in sorted({int(r["batch_size"]) for r in sel}):
        xs = [r for r in sel if int(r["batch_size"]) == b]
        sp = [float(r["measured_spread"]) for r in xs]
        beyond = sum(abs(float(r["latency_s"]) / float(r["measured_latency_s"]) - 1)
                     > float(r["measured_spread"]) for r in xs)
        out.append(f"| {b} | {len(xs)} | {quantile(sp, 0.5) * 100:.1f}% / "
                   f"{quantile(sp, 0.9) * 100:.1f}% / {max(sp) * 100:.1f}% | {beyond} of "
                   f"{len(xs)} |")
    return out


def _configs(w: Any, batches: list[int], max_devices: int, max_k: int, schedule: str,
             min_devices: int = 1) -> list:
    out = []
    for n in powers_of_two(min_devices, max_devices):
        out += [c for c in enumerate_space(w.name, n, batches, max_microbatches=max_k,
                                           schedules=[schedule])]
    return sorted(out, key=lambda c: (c.batch_size, c.devices, c.dp, c.tp, c.pp,
                                      c.microbatches))


def _selected(configs: list, wanted: list[str]) -> list:
    """The configurations of the space named ``D,T,P,K`` in ``wanted`` (every batch size);
    a name that is not ``D,T,P,K`` or that the space lacks is a ``ConfigError``."""
    keys = []
    for text in wanted:
        parts = text.split(",")
        if len(parts) != 4 or not all(x.isdigit() and int(x) > 0 for x in parts):
            raise ConfigError(f"--configs {text}: expected D,T,P,K (four positive integers, "
                              "e.g. 2,1,2,4)")
        keys.append(tuple(int(x) for x in parts))
    have = {(c.dp, c.tp, c.pp, c.microbatches) for c in configs}
    missing = [k for k in keys if k not in have]
    if missing:
        d, t, p, k = missing[0]
        raise ConfigError(f"--configs {d},{t},{p},{k} is not in the space measured (see "
                          "--max-devices, --min-devices, --max-microbatches); without "
                          "--configs every configuration of the space runs")
    wanted_set = set(keys)
    return [c for c in configs if (c.dp, c.tp, c.pp, c.microbatches) in wanted_set]


def memory_check_configs(w: Any, configs: list, hardware: Any, limit: int, margin: float,
                         max_configs: int) -> dict[Any, int]:
    """The configurations whose predicted peak memory (bytes, the busiest device's, on
    ``hardware``) lies within ``margin`` (a fraction) of ``limit``, nearest first, taken in
    turn from above and below the limit, at most ``max_configs``; with their peaks."""
    import distir
    from distir.errors import TransformError

    models: dict[int, Any] = {}
    sides: tuple[list, list] = ([], [])  # (above, below): (distance, order, config, peak)
    for i, c in enumerate(configs):
        if c.batch_size in models and models[c.batch_size] is None:
            continue  # (a batch size the transforms refused)
        try:  # (a batch size or a configuration the transforms refuse is not a candidate)
            seq = models.get(c.batch_size)
            if seq is None:
                models[c.batch_size] = None
                seq = models[c.batch_size] = w.analyze(c.batch_size, hardware=hardware)
            fn = w.program(seq, c)
        except TransformError:
            continue
        peak = max(distir.simulate(fn, hardware).held_bytes.values())
        ratio = peak / limit
        if abs(ratio - 1.0) <= margin:
            sides[0 if ratio > 1.0 else 1].append((abs(ratio - 1.0), i, c, int(peak)))
    for side in sides:
        side.sort(key=lambda x: (x[0], x[1]))
    picked: dict[Any, int] = {}
    k = 0
    while len(picked) < max_configs and (k < len(sides[0]) or k < len(sides[1])):
        for side in sides:
            if k < len(side) and len(picked) < max_configs:
                picked[side[k][2]] = side[k][3]
        k += 1
    return picked


def cmd_measure(args: argparse.Namespace) -> int:
    from grid_search.models import _is_file
    from grid_search.real import iter_measure

    if _is_file(args.model):  # a model file, with the options its search was given
        base = _file_workload(args, sorted(set(args.batch_sizes)))
        args.dtype = _main_dtype(base.build(min(args.batch_sizes)))  # (the file's own)
    else:
        given = _file_options(args)
        if given:
            raise ConfigError(f"{', '.join(given)}: {'these go' if len(given) > 1 else 'it goes'}"
                              " with a model file (--model FILE.onnx or FILE.dir)")
        base = workload(args.model, dtype=args.dtype)
    w = dataclasses.replace(base, transform=args.transform)
    schedule = "1f1b" if w.training else "gpipe"
    configs = _configs(w, args.batch_sizes, args.max_devices, args.max_microbatches, schedule,
                       args.min_devices)
    if args.configs:
        configs = _selected(configs, args.configs)
    limit = args.memory_limit
    predicted: dict[Any, int] = {}
    if args.memory_check:
        from distir.analysis.hardware import load_hardware

        # Without --memory-limit, the card's own capacity: what it offers tensors (the
        # profile's reserved_bytes less), and the runs uncapped.
        around = limit if limit is not None else \
            load_hardware(args.hardware).usable_memory_bytes
        # (a step replayed as a CUDA graph holds a second set of the libraries' workspaces)
        hw = load_hardware(args.hardware)
        predicted = memory_check_configs(w, configs, hw.for_cuda_graphs() if args.cuda_graph
                                         else hw, around, args.margin, args.max_configs)
        configs = sorted(predicted, key=lambda c: (c.batch_size, c.devices, c.dp, c.tp, c.pp,
                                                   c.microbatches))
        print(f"memory check: {len(configs)} configurations predicted within "
              f"{args.margin:.0%} of {around / 2**20:.1f} MiB", file=sys.stderr)
    print(f"measuring {len(configs)} configurations of {w.name} ({args.dtype})",
          file=sys.stderr)
    import torch

    env = {"torch": torch.__version__, "python": platform.python_version(),
           "cuda": str(torch.version.cuda), "dtype": args.dtype}
    cols = ["model", "batch_size", "dp", "tp", "pp", "microbatches", "schedule", "strategy",
            "devices", "measured_status", "measured_latency_s", "measured_throughput",
            "measured_peak_memory_bytes", "measured_peak_memory_per_device",
            "measured_device", "reason", "memory_limit_bytes", "predicted_peak_memory_bytes",
            "program_fingerprint", "stages_hardware", "cuda_graph", "transform", "env",
            "measured_host_cost_s", "measured_host_share", *CLOCK_COLUMNS,
            "measured_nonfinite", "measured_inputs"]
    # A profile file by its absolute path: compare may run from another directory.
    stages_hardware = os.path.abspath(args.hardware) if os.path.isfile(args.hardware) \
        else args.hardware
    with open(args.out, "w", newline="", encoding="utf-8") as f:
        wr = csv.DictWriter(f, cols, extrasaction="ignore")
        wr.writeheader()
        f.flush()
        for r in iter_measure(w, configs, backend=args.backend, steps=args.steps,
                              warmup=args.warmup, memory_limit=limit, profile=args.profile,
                              profile_marks=not args.profile_kernels,
                              hardware=args.hardware, fresh_sessions=args.memory_check,
                              cuda_graph=args.cuda_graph, timeout_s=args.timeout,
                              host_cost=not (args.no_host_cost or args.memory_check)):
            c = next((c for c in configs if c.as_row() == {k: r[k] for k in c.as_row()}),
                     None)
            wr.writerow({**r, "env": str(env), "memory_limit_bytes": limit or "",
                         "transform": w.transform,
                         "stages_hardware": stages_hardware,
                         "predicted_peak_memory_bytes": predicted.get(c, "")})
            f.flush()  # a run cut short keeps every row measured so far
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def _stage_profile(name: str) -> Any:
    """The profile that weighed a row's pipeline stages, by the name a row records: a
    search's ``hardware`` column writes ``NAME+graph`` for a profile used for replayed
    steps (``Hardware.for_cuda_graphs``)."""
    if name.endswith("+graph"):
        from distir.analysis.hardware import load_hardware

        return load_hardware(name.removesuffix("+graph")).for_cuda_graphs()
    return name


def _is_file_label(label: str) -> bool:
    """Whether a row's ``model`` names a model file (``bert.onnx``, ``step.dir``, with a
    ``+train-...`` suffix when it was made a training step)."""
    return label.split("+")[0].endswith((".onnx", ".dir"))


def _file_options(args: argparse.Namespace) -> list[str]:
    """The options given that only a model file takes (``--dim``, ``--batch-input`` and the
    ``--train`` options)."""
    return [f for f, v in (("--dim", args.dim), ("--batch-input", args.batch_input),
                           ("--train", args.train), ("--loss", args.loss),
                           ("--optimizer", args.optimizer), ("--lr", args.lr))
            if v is not None and v != [] and v is not False]


def _file_workload(args: argparse.Namespace, batches: list[int]) -> Any:
    """The workload of ``args.model``, a model file, with the options a search of it was
    given."""
    from distir.cli import _train
    from distir.cli.importer import parse_dims

    return workload(args.model, train=_train.from_args(args), dims=parse_dims(args.dim),
                    batch_input=args.batch_input, batch_sizes=batches)


def _compare_rows(args: argparse.Namespace, rows: list[dict[str, Any]],
                  ) -> tuple[list[dict[str, Any]], Any, bool]:
    """The measured rows of a file (a search's CSV after ``--run-top`` holds rows never
    run: they are left out), the workload that rebuilds their programs, and whether it is a
    model file (``--model``). One-line errors for rows of a model file without ``--model``,
    and for a ``--model`` whose workload is not the rows'."""
    label = rows[0]["model"].split("@")[0]
    measured = [r for r in rows if (r.get("measured_status") or "").strip()]
    if not measured:
        raise ConfigError(f"{args.measured}: no row was measured (no measured_status); run "
                          "the configurations first (grid-search --run-top, study measure)")
    if args.model is None:
        given = _file_options(args)
        if given:
            raise ConfigError(f"{', '.join(given)}: these go with --model FILE (rows of a "
                              "model file)")
        if _is_file_label(label):
            raise ConfigError(f"{args.measured}: its rows are of the model file {label}: "
                              "pass --model FILE with the --dim, --batch-input and --train "
                              "options grid-search was given, to rebuild its programs")
        return measured, workload(label, dtype=args.dtype), False
    w = _file_workload(args, sorted({int(r["batch_size"]) for r in measured}))
    if w.name != label:
        raise ConfigError(f"{args.measured}: its rows are of {label}, and --model "
                          f"{args.model} with these options is {w.name}: give the file and "
                          "the --train options grid-search was given")
    return measured, w, True


def cmd_compare(args: argparse.Namespace) -> int:
    import distir
    from distir.analysis.allocator import near_capacity
    from distir.analysis.hardware import load_hardware
    from distir.errors import TransformError
    from grid_search.models import transform_of
    from grid_search.real import accuracy, program_fingerprint
    from grid_search.space import Config

    with open(args.measured, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        print(f"{args.measured}: no rows", file=sys.stderr)
        return 1
    repeats = repeat_latencies(rows, args.repeat, args.measured) if args.repeat else {}
    for i, xs in repeats.items():
        r = rows[i]
        every = [float(r["measured_latency_s"]), *xs]
        r["repeat_latencies_s"] = " ".join(f"{x:.6g}" for x in xs)
        r["measured_spread"] = max(every) / min(every) - 1
    rows, w, file_model = _compare_rows(args, rows)
    hw = load_hardware(args.hardware)
    hw_graph = hw.for_cuda_graphs()
    models: dict[tuple[int, str], Any] = {}
    stale: list[str] = []
    unchecked = checked = 0
    for line, r in enumerate(rows, start=2):  # line 1 of the file is the header
        b = int(r["batch_size"])
        # The profile that weighed the pipeline stages when the row was measured
        # (--stages-hardware, else the row's own column, else the one simulated), so
        # that the program simulated is the program measured.
        cuts = args.stages_hardware or (r.get("stages_hardware") or "").strip() \
            or (r.get("hardware") or "").strip() or args.hardware
        if (b, cuts) not in models:
            models[b, cuts] = w.analyze(b, hardware=_stage_profile(cuts))
        # rebuilt by the transform that wrote it (rows measured before dtp became the
        # passes' composition were the tower's)
        cfg = Config(w.name, b, int(r["dp"]), int(r["tp"]), int(r["pp"]),
                     int(r["microbatches"]), r["schedule"])
        try:
            fn = dataclasses.replace(w, transform=transform_of(r)).program(models[b, cuts], cfg)
        except TransformError as e:  # refused there too: nothing to compare
            r.update(latency_s="", throughput="", peak_memory_bytes="", reason=e.message)
            continue
        recorded = (r.get("program_fingerprint") or "").strip()
        if not recorded:
            unchecked += r.get("measured_status") in ("ok", "oom")
        elif recorded != (today := program_fingerprint(fn)):
            where = (f"{args.measured}:{line} (batch {b}, D{r['dp']} T{r['tp']} P{r['pp']} "
                     f"K{r['microbatches']} {r['schedule']})")
            if not args.skip_stale:
                raise StaleMeasurementError(
                    f"{where} was measured on program {recorded}, but the transform now "
                    f"builds {today} for it ({args.dtype}): the program "
                    "changed since; measure it again (python -m grid_search.study measure), "
                    "or pass --skip-stale to compare the other rows")
            stale.append(where)
            r["stale"] = "true"
            continue
        else:
            checked += 1
        # A step replayed as a CUDA graph has no per-op host dispatch to model.
        graph = _graph(r)
        sim = distir.simulate(fn, hardware=hw_graph if graph else hw, batch_size=b)
        per = [int(sim.held_bytes.get(d, 0)) for d in range(int(r["devices"]))]
        r["latency_s"] = sim.latency_s
        if sim.host_s:  # the profile models host dispatch: the busiest host's time
            r["host_s"] = max(sim.host_s.values())
        r["throughput"] = b / sim.latency_s
        r["peak_memory_bytes"] = max(per)
        limit = int(float(r.get("memory_limit_bytes") or 0)) or None
        fits = max(per) <= (limit or sim.hardware.usable_memory_bytes)
        # Near the capacity: what the caching allocator reserves on each rank, against
        # the card less what that rank's communicators hold (or the allocator's cap).
        try:
            verdict = near_capacity(fn, dict(enumerate(per)), sim.hardware,
                                    int(r["devices"]), limit)
        except Exception as e:  # noqa: BLE001 - a bug in the replay: keep liveness's verdict
            first = (str(e).strip().splitlines() or [""])[0]
            print(f"warning: line {line}: allocator replay failed (a bug in distir; please "
                  f"report it): {type(e).__name__}: {first}", file=sys.stderr)
            verdict = None
        if verdict is not None:
            if verdict.replayed:
                # (with the libraries' workspaces, which the replayed program does not name)
                r["predicted_reserved_bytes"] = verdict.reserve.reserved_bytes + \
                    sim.hardware.workspace_held
            r["predicted_capacity_bytes"] = verdict.capacity
            fits = verdict.fits
        r["predicted_fits"] = str(fits).lower()
    notes = _program_notes(args.measured, unchecked, stale) + _input_notes(args.measured, rows,
                                                                           w)
    for n in notes:
        print(f"warning: {n}", file=sys.stderr)
    rows = [r for r in rows if not r.get("stale")]
    if not rows:
        raise StaleMeasurementError(f"{args.measured}: every row was measured on a program "
                                    "the transform no longer builds; measure them again")
    base = args.out
    os.makedirs(os.path.dirname(base) or ".", exist_ok=True)
    with open(base + ".csv", "w", newline="", encoding="utf-8") as f:
        wr = csv.DictWriter(f, list(dict.fromkeys(k for r in rows for k in r)), restval="")
        wr.writeheader()
        wr.writerows(rows)
    lines = [f"# {w.name}: simulated ({args.hardware}) vs measured", "",
             f"Measured: `{args.measured}` ({rows[0].get('measured_device', '')}; "
             f"{rows[0].get('env', '')}).", "",
             f"Programs: {checked} row(s) record the fingerprint of the program the "
             "transform builds today.", *notes, "",
             (f"Model file: {w.name}. Whether it is held out is for you to say: "
              "docs/fidelity.md lists the models the cost model was developed on."
              if file_model else held_out_note(w.name, args.dtype)), "",
             *(["Steps measured as CUDA graph replays (`--cuda-graph`): simulated without "
                "host dispatch.", ""] if any((r.get("cuda_graph") or "") == "true"
                                              for r in rows) else []),
             "Every figure is per batch size: pooled over batch sizes, a rank correlation "
             "mostly shows that bigger batches take longer, so none is given.", "",
             "| batch | configs | Spearman | latency error: median / worst | memory error: "
             "median / worst | top predicted | its measured throughput | best measured "
             "(pure D / T / P / any) |",
             "|---|---|---|---|---|---|---|---|"]
    ok_all = [r for r in rows if r.get("measured_status") == "ok" and r.get("latency_s") != ""]
    for b in sorted({int(r["batch_size"]) for r in rows}):
        sel = [r for r in ok_all if int(r["batch_size"]) == b]
        if not sel:
            continue
        acc = accuracy(sel)
        top = max(sel, key=lambda r: float(r["throughput"]))

        def best(strat: str | None, sel: list = sel) -> str:
            c = [r for r in sel if strat is None or r["strategy"] == strat]
            if not c:
                return "-"
            m = max(c, key=lambda r: float(r["measured_throughput"]))
            return f"{float(m['measured_throughput']):.0f}"

        lines.append(
            f"| {b} | {len(sel)} | {acc['spearman']:.3f} | "
            f"{acc['median_latency_error'] * 100:.1f}% / {acc['worst_latency_error'] * 100:.1f}% "
            f"| {acc['median_memory_error'] * 100:.1f}% / {acc['worst_memory_error'] * 100:.1f}% | "
            f"D{top['dp']} T{top['tp']} P{top['pp']} K{top['microbatches']} | "
            f"{float(top['measured_throughput']):.0f} | {best('D')} / {best('T')} / {best('P')} "
            f"/ {best(None)} |")
    lines += [""] + fidelity_table(rows)
    for extra_table in (host_table(rows), clock_table(rows), repeat_table(rows)):
        if extra_table:
            lines += [""] + extra_table
    n_summary = len(lines)
    # Where the profile models host dispatch, the busiest host's simulated time: a step
    # whose host time nears its latency is host-bound.
    host = any(r.get("host_s", "") != "" for r in rows)
    spread = any(r.get("measured_spread", "") != "" for r in rows)
    share = any(r.get("measured_host_share", "") != "" for r in rows)
    extra = (" host ms |" if host else "") + (" spread |" if spread else "") + \
        (" host's own cost / step |" if share else "")
    blank = (" |" if host else "") + (" |" if spread else "") + (" |" if share else "")
    lines += ["", "| batch | D | T | P | K | predicted ms | measured ms | error | predicted GiB | "
              "measured GiB |" + extra, "|---|---|---|---|---|---|---|---|---|---|"
              + ("---|" if host else "") + ("---|" if spread else "") + ("---|" if share else "")]
    for r in rows:
        if r.get("latency_s") == "":
            lines.append(f"| {r['batch_size']} | {r['dp']} | {r['tp']} | {r['pp']} | "
                         f"{r['microbatches']} | refused | {r.get('measured_status')} | | | |"
                         + blank)
            continue
        h = f" {float(r['host_s']) * 1e3:.2f} |" if host and r.get("host_s", "") != "" else \
            (" |" if host else "")
        if spread:
            h += f" {float(r['measured_spread']) * 100:.1f}% |" \
                if r.get("measured_spread", "") != "" else " |"
        if share:
            h += f" {float(r['measured_host_share']) * 100:.0f}% |" \
                if r.get("measured_host_share", "") != "" else " |"
        if r.get("measured_status") != "ok":
            lines.append(f"| {r['batch_size']} | {r['dp']} | {r['tp']} | {r['pp']} | "
                         f"{r['microbatches']} | {float(r['latency_s']) * 1e3:.2f} | "
                         f"{r.get('measured_status')} | | | |" + h)
            continue
        p, m = float(r["latency_s"]), float(r["measured_latency_s"])
        lines.append(f"| {r['batch_size']} | {r['dp']} | {r['tp']} | {r['pp']} | "
                     f"{r['microbatches']} | {p * 1e3:.2f} | {m * 1e3:.2f} | "
                     f"{(p - m) / m * 100:+.1f}% | {float(r['peak_memory_bytes']) / 2**30:.2f} | "
                     f"{float(r['measured_peak_memory_bytes']) / 2**30:.2f} |" + h)
    with open(base + ".md", "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines[:n_summary]))
    print(f"wrote {base}.csv and {base}.md", file=sys.stderr)
    return 0


def add_workload_arguments(p: argparse.ArgumentParser) -> None:
    """``--model``, ``--dtype``, ``--dim``, ``--batch-input`` and the ``--train`` options:
    what ``workload_from_args`` reads."""
    from distir.cli import _train

    p.add_argument("--model", required=True,
                   help="a built-in model (gpt2-..., mlp-...) or a model file (.onnx, .dir) "
                   "with the --dim, --batch-input and --train options its search was given")
    p.add_argument("--dtype", default="Float16", help="of a built-in model (a file's own "
                   "dtype is used)")
    p.add_argument("--dim", action="append", default=[], metavar="NAME=N",
                   help="with --model FILE.onnx: bind a symbolic dimension (repeatable)")
    p.add_argument("--batch-input", default=None, metavar="NAME",
                   help="with --model FILE: the input that carries the batch")
    _train.add_arguments(p)


def workload_from_args(args: argparse.Namespace) -> Any:
    """The workload ``study explain`` (and ``calibration.memory_trace measure``) runs: a
    built-in model by name (``--dtype``), or a model file with the ``--dim``,
    ``--batch-input`` and ``--train`` options a search of it was given (the file's own
    dtype), so that a ``grid-search --model FILE --run-top`` row is rebuilt as measured (its
    ``program_fingerprint`` is printed beside the result)."""
    from grid_search.models import _is_file

    if not _is_file(args.model):
        given = _file_options(args)
        if given:
            raise ConfigError(f"{', '.join(given)}: {'these go' if len(given) > 1 else 'it goes'}"
                              " with a model file (--model FILE.onnx or FILE.dir)")
        return workload(args.model, dtype=args.dtype)
    return _file_workload(args, [args.batch_size])


def _main_dtype(fn: Any) -> str:
    """The floating dtype most of a program's parameter elements have (a model file's own
    dtype), or ``"-"`` for a program without floating parameters."""
    from collections import Counter

    from distir.ir.types import TensorType

    fn = getattr(fn, "entry", fn)
    n: Counter[str] = Counter()
    for p in fn.params:
        t = p.type
        if isinstance(t, TensorType) and t.dtype.is_float:
            n[t.dtype.value] += t.numel
    return n.most_common(1)[0][0] if n else "-"


def _write_known_weights(fn: Any, path: str) -> None:
    """The program's initializers small enough to enter the interpreters as known values
    (``KNOWN_INITIALIZER_ELEMENTS``), written beside its ``.dir`` as ``distir.load`` reads
    them: the projection folds them into constants, and ``distir explain`` of the program
    read back without them would not match its traces. The larger weights (their values
    change nothing simulated) are not written."""
    import numpy as np

    from distir.analysis.api import KNOWN_INITIALIZER_ELEMENTS
    from distir.ir.text import write_weights

    small = {k: v for k, v in (getattr(fn, "initializers", None) or {}).items()
             if np.asarray(v).size <= KNOWN_INITIALIZER_ELEMENTS}
    if small:
        write_weights(path, small)


def cmd_explain(args: argparse.Namespace) -> int:
    """Run one configuration with ``--profile`` and explain it against the simulation."""
    import json

    import distir
    from distir.analysis.explain import explain, format_table, write_perfetto
    from grid_search.real import program_fingerprint
    from grid_search.space import Config

    w = dataclasses.replace(workload_from_args(args), transform=args.transform)
    schedule = args.schedule or ("1f1b" if w.training else "gpipe")
    fn = w.program(w.analyze(args.batch_size, hardware=args.stages_hardware or args.hardware,
                             weights=True),
                   Config(w.name, args.batch_size, args.dp, args.tp, args.pp,
                          args.microbatches, schedule))
    out = args.out
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "program.dir"), "w", encoding="utf-8") as f:
        f.write(distir.dumps(fn))
    _write_known_weights(fn, os.path.join(out, "program.npz"))
    traces = args.traces or os.path.join(out, "prof")
    runs = [("eager", traces, False)]
    if args.cuda_graph:  # the same program replayed: its kernels, matched to the marked ones
        runs.append(("replayed", traces + "_replay", True))
    results = {}
    for what, where, graph in runs:
        res = distir.run(fn, backend=args.backend, steps=args.steps, warmup=args.warmup,
                         profile=where, cuda_graph=graph)
        if res is None or res.status != "ok" or res.step_latency_s is None:
            print(f"the {what} run did not complete: {res.message if res else 'no result'}",
                  file=sys.stderr)
            return 1
        results[what] = res
    ex = explain(fn, [traces], args.hardware,
                 replay=[traces + "_replay"] if args.cuda_graph else None)
    res = results["replayed" if args.cuda_graph else "eager"]
    head = (f"{w.name} ({_main_dtype(fn) if w.family == 'user' else w.dtype}) batch "
            f"{args.batch_size}, D{args.dp} T{args.tp} "
            f"P{args.pp} K{args.microbatches} {schedule}, program {program_fingerprint(fn)}: "
            "timed steps' median "
            + "; ".join(f"{k} {r.step_latency_s * 1e3:.3f} ms" for k, r in results.items())
            + f" on {res.device_name}\n")
    table = head + format_table(ex, top=args.top) + "\n"
    with open(os.path.join(out, "explain.txt"), "w", encoding="utf-8") as f:
        f.write(table)
    with open(os.path.join(out, "explain.json"), "w", encoding="utf-8") as f:
        json.dump({"run": res.to_dict(), **({"eager_run": results["eager"].to_dict()}
                                            if args.cuda_graph else {}),
                   **ex.to_dict(top=args.top)}, f)
    write_perfetto(ex, os.path.join(out, "perfetto.json"))
    sys.stdout.write(table)
    print(f"wrote {out}/program.dir (its small weights in program.npz), explain.txt, "
          "explain.json, perfetto.json; traces in "
          f"{traces}", file=sys.stderr)
    return 0


def _program_notes(measured: str, unchecked: int, stale: list[str]) -> list[str]:
    """Warnings about rows whose program could not be checked, or was not today's."""
    out = []
    if unchecked:
        out.append(f"{measured}: {unchecked} measured row(s) record no program fingerprint "
                   "(measured before fingerprints were recorded): the programs simulated "
                   "today may differ from those measured (e.g. other pipeline stage cuts); "
                   "measure them again to be sure")
    if stale:
        out.append(f"{measured}: {len(stale)} row(s) left out (--skip-stale), measured on "
                   f"programs the transform no longer builds: {'; '.join(stale)}")
    return out


def _input_notes(measured: str, rows: list[dict[str, Any]], w: Any) -> list[str]:
    """Warnings about rows measured on inputs no training step has: Adam's state drawn at
    random (rows from before ``real.INPUTS`` was recorded), or a step that computed NaN."""
    out = []
    adam = w.train is not None and w.train.optimizer == "adam"
    ran = [r for r in rows if r.get("measured_status") == "ok"]
    old = sum(1 for r in ran if not (r.get("measured_inputs") or "").strip())
    if adam and old:
        out.append(f"{measured}: {old} row(s) were measured before runs drew Adam's moments "
                   "and step count as training holds them (2026-11-28): their updates ran on "
                   "random moments at about half speed, so those steps measured slower than "
                   "training's (grid_search/results/adam_step/); measure them again")
    nan = sum(1 for r in ran if float(r.get("measured_nonfinite") or 0) > 0)
    if nan:
        out.append(f"{measured}: {nan} row(s) computed on NaN (measured_nonfinite): their "
                   "time may not be training's; measure them on the model's weights")
    return out


def held_out_note(model: str, dtype: str) -> str:
    """Whether a study of ``model`` in ``dtype`` is held out (docs/fidelity.md)."""
    if (model, dtype) in DEVELOPMENT:
        return (f"**Not held out**: {model} in {dtype} is one of the studies the cost model "
                "was developed on (docs/fidelity.md); these figures show the fit, not the "
                "accuracy on new workloads.")
    return (f"Held out: {model} in {dtype} was not used to develop the cost model "
            "(docs/fidelity.md).")


def _pct(x: float) -> str:
    return "n/a" if x != x else f"{x * 100:.1f}%"


def fidelity_table(rows: list[dict[str, Any]]) -> list[str]:
    """Per batch size, the metrics of docs/fidelity.md: rank correlations, latency error
    median / 90th percentile / worst, the median signed error, the top-1 regret, memory
    error, and the out-of-memory prediction (runs that completed or ran out of memory)."""
    from grid_search.real import accuracy

    out = ["| batch | configs | Spearman | Kendall tau | latency error: median / p90 / worst "
           "| median signed error | top-1 regret | memory error: median / p90 / worst | "
           "out of memory: predicted right / fits but ran out |",
           "|---|---|---|---|---|---|---|---|---|"]
    for b in sorted({int(r["batch_size"]) for r in rows}):
        sel = [r for r in rows if int(r["batch_size"]) == b and r.get("latency_s") != ""]
        ok = [r for r in sel if r.get("measured_status") == "ok"]
        judged = [r for r in sel if r.get("measured_status") in ("ok", "oom")
                  and r.get("predicted_fits") in ("true", "false")]
        right = sum((r["predicted_fits"] == "true") == (r["measured_status"] == "ok")
                    for r in judged)
        missed = sum(r["predicted_fits"] == "true" and r["measured_status"] == "oom"
                     for r in judged)
        if not ok and not judged:
            continue
        a = accuracy(ok)
        out.append(
            f"| {b} | {len(ok)} | {a['spearman']:.3f} | {a['kendall']:.3f} | "
            f"{_pct(a['median_latency_error'])} / {_pct(a['p90_latency_error'])} / "
            f"{_pct(a['worst_latency_error'])} | {_pct(a['median_signed_latency_error'])} | "
            f"{_pct(a['top1_regret'])} | {_pct(a['median_memory_error'])} / "
            f"{_pct(a['p90_memory_error'])} / {_pct(a['worst_memory_error'])} | "
            f"{right} of {len(judged)} / {missed} |")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m grid_search.study", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="run configurations on the local GPUs")
    add_workload_arguments(m)
    m.add_argument("--batch-sizes", type=int, nargs="+", required=True)
    m.add_argument("--max-devices", type=int, required=True)
    m.add_argument("--max-microbatches", type=int, default=128)
    m.add_argument("--min-devices", type=int, default=1)
    m.add_argument("--configs", nargs="+", metavar="D,T,P,K",
                   help="only these configurations of the space (at every batch size), "
                   "e.g. to measure again the ones a study missed")
    m.add_argument("--backend", default=None)
    m.add_argument("--steps", type=int, default=5)
    m.add_argument("--warmup", type=int, default=2)
    m.add_argument("--memory-limit", type=_size, default=None, metavar="BYTES",
                   help="cap every run's allocator at this many bytes per device (e.g. 8GiB)")
    m.add_argument("--profile", default=None, metavar="DIR",
                   help="write each run's per-rank traces (distir run --profile) under DIR")
    m.add_argument("--profile-kernels", action="store_true",
                   help="with --profile: trace the kernels and runtime calls only, without "
                   "the per-op marks (which cost host time on host-bound steps)")
    m.add_argument("--cuda-graph", action="store_true",
                   help="time each step replayed as a CUDA graph (captured after the "
                   "warm-up): the host launches one graph a step instead of every op; "
                   "compare then simulates those rows without host dispatch")
    m.add_argument("--no-host-cost", action="store_true",
                   help="eager steps: skip the extra step, after each configuration's timed "
                   "ones, that measures the host's own cost of a step (the rows' "
                   "measured_host_cost_s and measured_host_share; compare reports the rows "
                   "paced by their hosts apart; --memory-check always skips it)")
    m.add_argument("--timeout", type=float, default=300.0, metavar="S",
                   help="seconds a collective may wait for its peers before a run is "
                   "declared hung (default 300)")
    m.add_argument("--memory-check", action="store_true",
                   help="run only configurations predicted near the memory capacity (the "
                   "profile's, or --memory-limit), each in a session of its own (so that "
                   "it holds only its own communicators)")
    m.add_argument("--hardware", default="h100-sxm",
                   help="the profile the study is simulated on (default h100-sxm): it "
                   "predicts the peaks for --memory-check and weighs pipeline stages "
                   "balanced by cost, so that the programs run are those `compare` "
                   "simulates")
    m.add_argument("--margin", type=float, default=0.25,
                   help="--memory-check: predicted peak within this fraction of the capacity "
                   "(default 0.25)")
    m.add_argument("--max-configs", type=int, default=24,
                   help="--memory-check: at most this many, half above and half below")
    m.add_argument("--transform", default="passes", choices=["passes", "tower"],
                   help="what writes the programs: passes (default, distir.transforms.dtp) "
                   "or tower (the builder dtp was before, to measure again a study "
                   "measured with it); recorded in each row, which compare rebuilds with")
    m.add_argument("-o", "--out", required=True)
    m.set_defaults(func=cmd_measure)
    c = sub.add_parser("compare", help="simulate measured configurations and compare")
    c.add_argument("measured")
    c.add_argument("--hardware", default="h100-sxm")
    c.add_argument("--dtype", default="Float16")
    c.add_argument("--stages-hardware", default=None, metavar="H",
                   help="the profile that weighed the pipeline stages when the rows were "
                   "measured (measure's --hardware; default: each row's stages_hardware "
                   "column, else --hardware)")
    c.add_argument("--skip-stale", action="store_true",
                   help="leave out (with a warning) the rows whose recorded program "
                   "fingerprint differs from today's program, instead of refusing")
    c.add_argument("--repeat", nargs="+", default=[], metavar="CSV",
                   help="other measurements of the same configurations (another launch, "
                   "session or machine, same commit): each row gains the spread between its "
                   "measurements, and the report how many errors exceed their row's spread")
    c.add_argument("-o", "--out", required=True, help="output path without extension")
    c.add_argument("--model", default=None, metavar="FILE",
                   help="rows of a model file (a `distir grid-search --model FILE --run-top "
                   "K` CSV): the file, with the --dim, --batch-input and --train options the "
                   "search was given, to rebuild their programs (the file's own dtype: "
                   "--dtype is not used)")
    c.add_argument("--dim", action="append", default=[], metavar="NAME=N",
                   help="with --model FILE.onnx: bind a symbolic dimension, as grid-search "
                   "did (repeatable)")
    c.add_argument("--batch-input", default=None, metavar="NAME",
                   help="with --model: the input that carries the batch, as grid-search had")
    from distir.cli import _train

    _train.add_arguments(c)
    c.set_defaults(func=cmd_compare)
    e = sub.add_parser("explain", help="profile one configuration and explain it against "
                       "the simulation (distir run --profile, distir explain)")
    add_workload_arguments(e)
    e.add_argument("--batch-size", type=int, required=True)
    for k in ("dp", "tp", "pp", "microbatches"):
        e.add_argument(f"--{k}", type=int, default=1)
    e.add_argument("--schedule", default=None, help="default: 1f1b to train, gpipe to infer")
    e.add_argument("--hardware", default="h100-sxm")
    e.add_argument("--stages-hardware", default=None, metavar="H",
                   help="the profile that weighs the pipeline stages (default --hardware; "
                   "as measure's --hardware, to explain a measured row)")
    e.add_argument("--cuda-graph", action="store_true",
                   help="also run the step replayed as a CUDA graph, and time each op by "
                   "the replay's kernels (distir explain --replay)")
    e.add_argument("--transform", default="passes", choices=["passes", "tower"],
                   help="what writes the program (default passes; tower: to explain a row "
                   "of a study measured with it)")
    e.add_argument("--backend", default=None)
    e.add_argument("--steps", type=int, default=5)
    e.add_argument("--warmup", type=int, default=2)
    e.add_argument("--top", type=int, default=30, help="ops listed among the largest "
                   "differences (default 30)")
    e.add_argument("--traces", default=None, metavar="DIR",
                   help="where the per-rank traces go (default OUT/prof)")
    e.add_argument("-o", "--out", required=True, metavar="OUT", help="output directory")
    e.set_defaults(func=cmd_explain)
    args = p.parse_args(argv)
    from distir.errors import DistIRError

    try:
        return int(args.func(args) or 0)
    except DistIRError as e:
        print(str(e), file=sys.stderr)
        return 1


def _size(text: str) -> int:
    from distir.cli.run import _bytes

    return _bytes(text)


if __name__ == "__main__":
    sys.exit(main())
