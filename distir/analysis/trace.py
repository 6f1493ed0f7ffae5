"""Chrome trace export of a simulated timeline.

The trace is the JSON object format of the Trace Event Format (``{"traceEvents": [...]}``),
which Perfetto (ui.perfetto.dev) and chrome://tracing open: one process ("distir: FUNCTION
on HARDWARE"), one thread (track) per device, and per op one complete event (``"ph": "X"``)
on each device it occupies, with ``ts``/``dur`` in microseconds. An event's ``args`` hold
the op in IR syntax, its function, input and result types, its cost in seconds, FLOPs and
bytes. Compute ops have category ``compute``, transfers and collectives ``comm``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from distir.analysis.simulator import Simulation

__all__ = ["expand_events", "write_chrome_trace", "chrome_trace_events"]


def expand_events(events: list, function: str) -> list[tuple]:
    """``(start_s, seconds, devices, op, detail, function name)`` for every op in program
    order, calls expanded: the clocks are replayed exactly as the simulator ran them (an
    op starts when all its devices are free and ends on all of them together)."""
    from collections import defaultdict

    clock: defaultdict[int, float] = defaultdict(float)
    out: list[tuple] = []

    def walk(evs: list, fname: str) -> None:
        for head, rec in evs:
            if rec is None:  # a call: head is its summary
                walk(head.events, head.fn.name)
                continue
            devs, secs = rec[4], rec[2]
            start = max(clock[d] for d in devs)
            end = start + secs
            for d in devs:
                clock[d] = end
            out.append((start, secs, devs, head, rec[7], fname))

    walk(events, function)
    return out


def chrome_trace_events(sim: Simulation) -> list[dict[str, Any]]:
    """The trace events of a simulation (metadata first, then ops in program order)."""
    from distir.ir.printer import format_op

    name = f"distir: @{sim.function} on {sim.hardware.name}"
    evs: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": name}}]
    for d in sim.devices:
        evs.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": d,
                    "args": {"name": f"device {d}"}})
        evs.append({"name": "thread_sort_index", "ph": "M", "pid": 0, "tid": d,
                    "args": {"sort_index": d}})
    text: dict[int, str] = {}
    for start, secs, devs, op, detail, fname in sim.events():
        cost, ins, outs = detail[0], detail[1], detail[2]
        t = text.get(id(op))
        if t is None:
            t = text[id(op)] = format_op(op)
        args = {"op": t, "function": "@" + fname,
                "inputs": [None if x is None else str(x) for x in ins],
                "outputs": [str(x) for x in outs],
                "cost_s": secs, "flops": cost.flops, "bytes": cost.bytes}
        cat = "comm" if cost.comm else "compute"
        for d in devs:
            evs.append({"name": op.op_type, "cat": cat, "ph": "X", "pid": 0, "tid": d,
                        "ts": start * 1e6, "dur": secs * 1e6, "args": args})
    return evs


def write_chrome_trace(sim: Simulation, path: str) -> None:
    """Write ``sim``'s timeline to ``path`` as Chrome trace JSON, one event per line."""
    evs = chrome_trace_events(sim)
    with open(path, "w", encoding="utf-8") as f:
        f.write('{"displayTimeUnit": "ns", "otherData": ')
        f.write(json.dumps({"hardware": sim.hardware.name, "latency_s": sim.latency_s,
                            "function": sim.function}))
        f.write(', "traceEvents": [\n')
        for i, e in enumerate(evs):
            if i:
                f.write(",\n")
            f.write(json.dumps(e, separators=(",", ":")))
        f.write("\n]}\n")
