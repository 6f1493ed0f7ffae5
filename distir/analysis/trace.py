"""Chrome trace export of a simulated timeline.

The trace is the JSON object format of the Trace Event Format (``{"traceEvents": [...]}``),
which Perfetto (ui.perfetto.dev) and chrome://tracing open: one process ("distir: FUNCTION
on HARDWARE"), one thread (track) per device, plus one for its communication stream where
it runs asynchronous collectives (``ASYNC_OPS``), and per op one complete event
(``"ph": "X"``) on each device it occupies, with ``ts``/``dur`` in microseconds. An
event's ``args`` hold the op in IR syntax, its function, input and result types, its cost
in seconds, FLOPs and bytes. Compute ops have category ``compute``, transfers and
collectives ``comm``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from distir.ir.schemas import ASYNC_OPS

if TYPE_CHECKING:
    from distir.analysis.simulator import Simulation

__all__ = ["expand_events", "replay", "write_chrome_trace", "chrome_trace_events", "COMM_TRACK"]

COMM_TRACK = 100_000
"""Device ``d``'s asynchronous collectives go on track ``COMM_TRACK + d``."""


def expand_events(events: list, function: str, overlap_slowdown: float = 0.0,
                  comm_slowdown: float = 0.0) -> list[tuple]:
    """``(start_s, seconds, devices, op, detail, function name)`` for every op in program
    order, calls expanded: the clocks are replayed exactly as the simulator ran them (an
    op starts when all its devices are free and ends on all of them together; an
    asynchronous collective runs on the devices' communication clocks, and the first op
    to read one of its results waits for it; where the profile models host dispatch, no
    op starts before each of its devices' hosts has issued it). With ``comm_slowdown``
    (``Hardware.overlap_comm_slowdown``) a collective's ``seconds`` include its stretch
    by the bandwidth-bound compute beside it (``replay``)."""
    return replay(events, function, overlap_slowdown, comm_slowdown)[0]


def replay(events: list, function: str, overlap_slowdown: float = 0.0,
           comm_slowdown: float = 0.0, listed: bool = True) -> tuple[list[tuple], float]:
    """``(expand_events' list, the step's end)``, the end being when the last clock
    (compute, communication or host) stops; with ``listed`` false, the list is empty
    (the end alone, faster: no op is renamed or listed).

    ``comm_slowdown`` stretches asynchronous collectives by the bandwidth-bound compute
    beside them (the records' flag, ``Hardware.bandwidth_bound``): a bandwidth-bound op
    on device ``d`` running ``[t, t + w]`` while ``d``'s communication stream is busy
    until ``c > t`` delays that stream by ``comm_slowdown * min(w, c - t)``, so every
    collective of ``d`` still running or queued at ``t`` ends that much later. A
    collective on several devices ends with its most delayed device (the devices' stretches
    are not summed: replicas slowed alike slow a ring once), and the next collective on
    them starts after it; each device's overlap is reckoned on its own stream's time, so
    that replicas written out and one replica folded (``distir.analysis.replicas``) time
    alike. This needs concrete clocks, so it is a replay of the simulator's events (calls
    expanded), run only where the profile sets ``overlap_comm_slowdown``."""
    from collections import defaultdict, deque

    from distir.analysis.renaming import rename_detail
    from distir.analysis.simulator import comm_key

    clock: defaultdict[int, float] = defaultdict(float)
    host: defaultdict[int, float] = defaultdict(float)  # where the profile models hosts
    out: list[tuple] = []
    # With ``comm_slowdown``: each device's collectives not yet ended, oldest first, as
    # boxes ``[end alone, {device: stretch}, devices, index in out, start alone,
    # {device: delay of its start}]``.
    flight: defaultdict[int, deque] = defaultdict(deque)
    boxes: list[list] = []

    def ready(box: Any) -> float:
        return box if not isinstance(box, list) else box[0] + max(box[1].values(),
                                                                  default=0.0)

    def wait(inputs: list, pending: dict) -> None:
        for v in inputs:
            p = pending.pop(v, None)
            if p is not None:
                r = ready(p[1])
                if r > clock[p[0]]:
                    clock[p[0]] = r

    def stretch(d: int, t: float, w: float) -> None:
        """A bandwidth-bound op on ``d`` runs ``[t, t + w]`` while ``d``'s stream is busy
        (after ``t``): slow the stream."""
        c = comm_key(d)
        busy = clock[c] - t
        x = comm_slowdown * (w if w < busy else busy)
        q = flight[d]
        while q and ready(q[0]) <= t:  # ended before the op began
            q.popleft()
        for box in q:
            box[1][d] = box[1].get(d, 0.0) + x
            if box[4] > t:  # queued behind the one slowed: it starts later
                box[5][d] = box[5].get(d, 0.0) + x
        clock[c] += x

    def walk(evs: list, fname: str, pending: dict, m: dict[int, int] | None) -> None:
        # ``m``: the devices of ``evs`` -> the program's (None: the same), for the events
        # of a summary shared by calls on other devices (``distir.analysis.renaming``).
        for ev in evs:
            head, rec = ev[0], ev[1]
            if rec is None:  # a call: head is its summary, ev[2] the call
                ins = ev[2].inputs
                inner = {p: pending[a] for p, a in zip(head.fn.params, ins) if a in pending}
                ren = head.rename
                walk(head.events, head.fn.name, inner, m if ren is None else ren if m is None
                     else {k: m[x] for k, x in ren.items()})
                outs = ev[2].outputs
                for i, r in enumerate(head.fn.returns):
                    if r in inner:
                        pending[outs[i]] = inner[r]
                continue
            if pending:
                wait(head.inputs, pending)
            d = rec[1]
            if d >= 0:  # the common case: one device, not a collective
                if m is not None:
                    d = m[d]
                secs, h = rec[2], rec[9]
                start = clock[d]
                if h:  # its host issues the op, which starts no earlier
                    x = host[d] + h
                    host[d] = x
                    if x > start:
                        start = x
                clock[d] = start + secs
                if comm_slowdown and rec[10] and secs and clock[comm_key(d)] > start:
                    stretch(d, start, secs)
                if listed:
                    out.append((start, secs, (d,), head, rec[7] if m is None
                                else rename_detail(rec[7], m), fname))
                continue
            devs, secs, detail, adevs, h = rec[4], rec[2], rec[7], rec[8], rec[9]
            if m is not None:
                devs = tuple(m[d] for d in devs)
                if listed:
                    detail = rename_detail(detail, m)
                if adevs is not None:
                    adevs = tuple(m[d] for d in adevs)
            if h:  # each device's host issues the op, which starts no earlier
                for d in devs:
                    host[d] += h
            if adevs is None:  # on several devices (a transfer, a blocking collective)
                start = max(max(clock[d], host[d]) for d in devs)
                end = start + secs
                for d in devs:
                    clock[d] = end
            else:
                start = max(max(clock[d], clock[comm_key(d)], host[d]) for d in devs)
                end = start + secs
                for d in devs:
                    clock[comm_key(d)] = end
                    clock[d] += overlap_slowdown * secs
                done: Any = end
                if comm_slowdown:
                    done = [end, {}, devs, len(out), start, {}]
                    if listed:
                        boxes.append(done)
                    for d in devs:
                        flight[d].append(done)
                for v, d in zip(head.outputs, adevs):
                    pending[v] = (d, done)
            if listed:
                out.append((start, secs, devs, head, detail, fname))

    walk(events, function, {}, None)
    for box in boxes:  # each collective's time as stretched
        i = box[3]
        e = out[i]
        t = e[0] + max(box[5].values(), default=0.0)
        out[i] = (t, ready(box) - t, *e[2:])
    return out, max(max(clock.values(), default=0.0), max(host.values(), default=0.0))


def chrome_trace_events(sim: Simulation) -> list[dict[str, Any]]:
    """The trace events of a simulation (metadata first, then ops in program order)."""
    from distir.ir.printer import format_op

    name = f"distir: @{sim.function} on {sim.hardware.name}"
    evs: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": name}}]
    timeline = sim.events()
    streams = {d for e in timeline if e[3].op_type in ASYNC_OPS for d in e[2]}
    for d in sim.devices:
        tracks = [(d, f"device {d}")]
        if d in streams:
            tracks.append((COMM_TRACK + d, f"device {d} comm"))
        for i, (tid, label) in enumerate(tracks):
            evs.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": tid,
                        "args": {"name": label}})
            evs.append({"name": "thread_sort_index", "ph": "M", "pid": 0, "tid": tid,
                        "args": {"sort_index": 2 * d + i}})
    text: dict[int, str] = {}
    for start, secs, devs, op, detail, fname in timeline:
        cost, ins, outs = detail[0], detail[1], detail[2]
        t = text.get(id(op))
        if t is None:
            t = text[id(op)] = format_op(op)
        args = {"op": t, "function": "@" + fname,
                "inputs": [None if x is None else str(x) for x in ins],
                "outputs": [str(x) for x in outs],
                "cost_s": secs, "flops": cost.flops, "bytes": cost.bytes}
        cat = "comm" if cost.comm else "compute"
        stream = COMM_TRACK if op.op_type in ASYNC_OPS else 0
        for d in devs:
            evs.append({"name": op.op_type, "cat": cat, "ph": "X", "pid": 0,
                        "tid": stream + d, "ts": start * 1e6, "dur": secs * 1e6,
                        "args": args})
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
