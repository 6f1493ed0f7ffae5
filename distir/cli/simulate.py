"""``distir simulate``: simulated time and memory of one step on a hardware profile.

Prints the step latency, the throughput (with ``--batch-size``), and per device the busy,
compute, communication and idle time and the peak memory against the profile's capacity;
``--json`` prints one JSON object instead; ``--trace OUT.json`` writes the timeline as a
Chrome trace (open it in https://ui.perfetto.dev).
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("simulate", help="simulated time and memory of a .dir program",
                       description="Simulate one step of the entry function of a .dir file "
                       "on a hardware profile: latency, per-device busy/idle time and peak "
                       "memory, optionally a Chrome trace of the timeline.")
    p.add_argument("file", help="a .dir file")
    p.add_argument("--hardware", "-H", default="h100-sxm", metavar="H",
                   help="a profile name (see calibration/profiles) or a path to a profile "
                   ".json file (default h100-sxm)")
    p.add_argument("--trace", metavar="OUT.json", default=None,
                   help="write the timeline as Chrome trace JSON (opens in Perfetto)")
    p.add_argument("--batch-size", type=int, default=None, metavar="N",
                   help="samples per step, to report throughput")
    p.add_argument("--fallback", action="store_true",
                   help="cost ops without a cost rule as memory-bound kernels (with a "
                   "warning listing them) instead of failing")
    p.add_argument("--cuda-graph", action="store_true",
                   help="the step as `distir run --cuda-graph` runs it, replayed as a CUDA "
                   "graph: the profile's host dispatch is not modelled")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object on standard output and nothing else")
    p.set_defaults(func=run_simulate)


def run_simulate(args: argparse.Namespace) -> int:
    import distir
    from distir.analysis.hardware import load_hardware
    from distir.analysis.simulator import CostFallbackWarning, simulate

    m = distir.load(args.file)
    hw = load_hardware(args.hardware)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CostFallbackWarning)
        sim = simulate(m, hw.for_cuda_graphs() if args.cuda_graph else hw, args.batch_size,
                       fallback=args.fallback)
    for w in caught:
        print(f"warning: {w.message}", file=sys.stderr)
    if args.trace is not None:
        sim.write_trace(args.trace)
    from distir.analysis.allocator import near_capacity

    # Near the capacity, the caching allocator's reserve decides (docs/simulation.md).
    try:
        verdict = near_capacity(m.entry, dict(sim.held_bytes), sim.hardware,
                                len(sim.devices))
    except Exception as e:  # noqa: BLE001 - a bug in the replay: report, keep the rest
        first = (str(e).strip().splitlines() or [""])[0]
        print(f"warning: allocator replay failed (a bug in distir; please report it): "
              f"{type(e).__name__}: {first}", file=sys.stderr)
        verdict = None
    if args.json:
        doc = {"file": args.file, **sim.to_dict()}
        if verdict is not None:
            doc["allocator"] = {"fits": verdict.fits, "device": verdict.device,
                                "reserved_bytes": verdict.reserve.reserved_bytes,
                                "capacity_bytes": verdict.capacity,
                                "replayed": verdict.replayed}
        if args.trace is not None:
            doc["trace"] = args.trace
        sys.stdout.write(json.dumps(doc) + "\n")
        return 0
    sys.stdout.write(format_report(sim, verdict))
    if args.trace is not None:
        sys.stdout.write(f"trace written to {args.trace} (open it in https://ui.perfetto.dev)\n")
    return 0


def _time(s: float) -> str:
    if s >= 1.0:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3f} ms"
    return f"{s * 1e6:.1f} us"


def _bytes(n: float) -> str:
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n / k:.2f} {unit}"
    return f"{int(n)} B"


def format_report(sim: object, verdict: object = None) -> str:
    """The human-readable report of a ``Simulation`` (and of ``near_capacity``'s verdict
    on its program, when it gave one)."""
    from distir.analysis.simulator import Simulation

    assert isinstance(sim, Simulation)
    hw = sim.hardware
    lines = [f"@{sim.function} on {hw.name}"
             + ("" if hw.calibrated else " (analytic profile, not calibrated)"),
             f"latency     {_time(sim.latency_s)}  ({sim.num_ops} ops)"]
    if sim.throughput is not None:
        lines.append(f"throughput  {sim.throughput:,.1f} samples/s (batch {sim.batch_size})")
    lines.append("")
    host = sim.host_s  # (only where the profile models host dispatch)
    head = ("device", "busy", "compute", "comm", "idle", *(("host",) if host else ()),
            "peak memory", "of capacity")
    rows = [head]
    cap = hw.usable_memory_bytes
    for d in sim.devices:
        peak = sim.held_bytes[d]  # (with the libraries' workspaces)
        rows.append((str(d), _time(sim.busy_s[d]), _time(sim.compute_s[d]),
                     _time(sim.comm_s[d]), _time(sim.idle_s[d]),
                     *((_time(host[d]),) if host else ()), _bytes(peak),
                     f"{100.0 * peak / cap:.1f}%" + (
                         " OUT OF MEMORY" if peak > cap and verdict is None else "")))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    for r in rows:
        lines.append("  ".join(c.rjust(w) if i else c.ljust(w)
                               for i, (c, w) in enumerate(zip(r, widths))).rstrip())
    if verdict is not None:
        from distir.analysis.allocator import Verdict

        assert isinstance(verdict, Verdict)
        lines.append("")
        what = (f"the caching allocator would reserve {_bytes(verdict.reserve.reserved_bytes)}"
                if verdict.replayed else
                f"the tensors alone need {_bytes(verdict.reserve.reserved_bytes)}")
        lines.append(f"near the capacity: {what} on device {verdict.device}, which offers "
                     f"{_bytes(verdict.capacity)} besides its communicators: "
                     + ("fits" if verdict.fits else "OUT OF MEMORY"))
    if sim.uncosted_ops:
        lines.append("")
        lines.append("costed by the fallback rule: " + ", ".join(sim.uncosted_ops))
    return "\n".join(lines) + "\n"
