"""A measured step beside its simulation: per-op times aligned, compared and explained.

``explain(fn, traces, hardware)`` takes a program and the per-rank traces that
``distir run --profile`` wrote for it (``distir.backend.profiling``: every op of rank r's
program in a ``distir#I OPTYPE`` range) and the simulation of the same program, and returns
an ``Explanation``: per op kind and per device the simulated and measured seconds, the
critical path of each timeline, and the ops whose times differ most.

Both timelines are reduced to one form, a ``Span`` per (device, op index of the device's
projected program): when the op started and how many seconds it took, on the device's
compute or communication stream. Measured spans:

- on a GPU, an op's time is the sum of the durations of the kernels, copies and sets that
  its range launched (matched by the profiler's correlation ids); it spans its first
  activity's start to its last one's end. An op that launches nothing takes no time.
- on the CPU, an op's time is its range's duration plus, for an asynchronous collective,
  its wait's (the time the host was blocked on it).

Simulated spans come from ``Simulation.events()``: each op of the global program on each
device it occupies, aligned in order with the device's projected program (a ``Send``'s
destination runs it as ``Recv``; a communication op within one device runs as
``Identity``; ops the projection folded into ``Constant`` ops are simulated only, the
``Constant`` ops measured only).

The critical path of a timeline is found backwards from the op that ends last: at each
op, the predecessor is whichever of its dependencies (the previous op on its device, the
ops on its device that produced its inputs, and for a communication op the same
dependencies of every participant) ended last. On the path, each op is charged the time
from its predecessor's end to its own end, so the charges add up to the path's length (a
collective a rank waited in is charged only from its last participant's arrival).
All times are seconds.
"""

from __future__ import annotations

import bisect
import json
import os
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from distir.errors import DistIRError
from distir.ir.schemas import ASYNC_OPS, COMM_OPS

if TYPE_CHECKING:
    from distir.analysis.projection import Projection
    from distir.analysis.simulator import Simulation
    from distir.ir.core import Function

__all__ = ["ExplainError", "Span", "RankTrace", "Explanation", "load_traces", "explain",
           "critical_path"]

_DEVICE_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
_LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver"})


class ExplainError(DistIRError):
    """A trace that cannot be read, or that is not a profile of the given program."""


@dataclass(frozen=True, slots=True)
class Span:
    """Op ``index`` of device ``device``'s program: started at ``start`` (seconds from the
    timeline's origin), busy for ``seconds``, ending at ``end``, on its device's compute
    stream or (``comm``) its communication stream."""

    device: int
    index: int
    kind: str
    start: float
    seconds: float
    end: float
    comm: bool = False


@dataclass(slots=True)
class RankTrace:
    """One rank's profiled step: its spans by op index and what the worker recorded
    (``info``: ``op_types``, ``step_s``, ``device``, ...)."""

    rank: int
    path: str
    info: dict[str, Any]
    spans: dict[int, Span] = field(default_factory=dict)


def _marker(name: str) -> tuple[int, str, bool] | None:
    from distir.backend.profiling import parse_marker

    return parse_marker(name)


def _read(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError:
        raise ExplainError(f"{path}: no such file (write the traces with "
                           "`distir run FILE --profile DIR`)") from None
    except (OSError, ValueError) as e:
        raise ExplainError(f"{path}: not a JSON trace ({e})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("distir"), dict) \
            or not isinstance(doc.get("traceEvents"), list):
        raise ExplainError(f"{path}: not a trace written by `distir run --profile` (no "
                           "'distir' key); profile the program with `distir run FILE "
                           "--profile DIR`")
    return doc


def _rank_events(doc: dict[str, Any], path: str) -> tuple[list[tuple], dict[int, list]]:
    """The op ranges ``(ts_us, dur_us, index, kind, is_wait, tid)`` in time order, and the
    device activities ``(ts_us, dur_us, stream)`` by the op index that launched them."""
    ranges: list[tuple] = []
    launches: list[dict[str, Any]] = []
    activity: dict[int, dict[str, Any]] = {}
    for e in doc["traceEvents"]:
        if e.get("ph") != "X":
            continue
        cat = e.get("cat", "")
        if cat == "user_annotation":
            m = _marker(str(e.get("name", "")))
            if m is not None:
                ranges.append((float(e["ts"]), float(e.get("dur", 0.0)), m[0], m[1], m[2],
                               e.get("tid")))
        elif cat in _LAUNCH_CATS:
            launches.append(e)
        elif cat in _DEVICE_CATS:
            c = (e.get("args") or {}).get("correlation")
            if c is not None:
                activity[int(c)] = e
    ranges.sort()
    by_op: dict[int, list] = defaultdict(list)
    if not activity:
        return ranges, by_op
    starts = [r[0] for r in ranges]
    for ln in launches:
        c = (ln.get("args") or {}).get("correlation")
        act = activity.get(int(c)) if c is not None else None
        if act is None:
            continue
        ts = float(ln["ts"])
        k = bisect.bisect_right(starts, ts) - 1
        if k < 0:
            continue
        r = ranges[k]
        # (By time alone: one thread runs the program, and its ranges never nest; the
        # profiler's thread ids for CUDA runtime calls have not always matched the ops'.)
        if ts <= r[0] + r[1]:
            by_op[r[2]].append(_activity(act))
    return ranges, by_op


def _activity(e: dict[str, Any]) -> tuple[float, float, Any, str]:
    """A device activity as ``(ts_us, dur_us, stream, name)``."""
    return (float(e["ts"]), float(e.get("dur", 0.0)), (e.get("args") or {}).get("stream"),
            str(e.get("name", "")))


REPLAY_WINDOW = 64
"""How far ahead ``align_replay`` looks, in either sequence, for the next activity of the
same name after a mismatch."""


def _is_comm(name: str) -> bool:
    return "nccl" in name.lower()


def align_replay(by_op: dict[int, list], replay: list[tuple]) -> tuple[dict[int, list], int, int]:
    """Each op's activities in a replayed step: ``by_op`` maps op indices to the activities
    ``(ts_us, dur_us, stream, name)`` their marked ranges launched in an eager step of the
    same program; ``replay`` is every device activity of one replay of the program's CUDA
    graph (which has no marks: the graph was captured from the same kernels, in the same
    order). The two sequences, in time order and taken apart into communication (NCCL)
    and other activities (the two streams' interleaving may differ), are walked side by
    side, matched by name, and resynchronized after a mismatch by the nearest same-named
    activity within ``REPLAY_WINDOW`` of either (of two such, the one after which more
    activities match). Returns the replay's activities per op,
    and how many eager and replay activities found no partner."""
    eager = sorted((a[0], i, a) for i, acts in by_op.items() for a in acts)
    out: dict[int, list] = defaultdict(list)
    lost_e = lost_r = 0
    for comm in (False, True):
        es = [(i, a) for _, i, a in eager if _is_comm(a[3]) == comm]
        rs = sorted(a for a in replay if _is_comm(a[3]) == comm)
        j = k = 0
        while j < len(es) and k < len(rs):
            if es[j][1][3] == rs[k][3]:
                out[es[j][0]].append(rs[k])
                j += 1
                k += 1
                continue
            # The nearer resynchronization: skip eager activities, or replay ones.
            skip_e = next((d for d in range(1, REPLAY_WINDOW)
                           if j + d < len(es) and es[j + d][1][3] == rs[k][3]), None)
            skip_r = next((d for d in range(1, REPLAY_WINDOW)
                           if k + d < len(rs) and rs[k + d][3] == es[j][1][3]), None)
            if skip_r is not None and skip_e is not None:  # by what follows each
                run_e = _run(es, rs, j + skip_e, k)
                run_r = _run(es, rs, j, k + skip_r)
                if run_e != run_r:
                    skip_e, skip_r = (skip_e, None) if run_e > run_r else (None, skip_r)
            if skip_r is not None and (skip_e is None or skip_r <= skip_e):
                lost_r += skip_r
                k += skip_r
            elif skip_e is not None:
                lost_e += skip_e
                j += skip_e
            else:
                lost_e += 1
                lost_r += 1
                j += 1
                k += 1
        lost_e += len(es) - j
        lost_r += len(rs) - k
    return dict(out), lost_e, lost_r


def _run(es: list, rs: list, j: int, k: int, limit: int = 16) -> int:
    """How many activities match by name from ``es[j]`` and ``rs[k]`` on (at most
    ``limit``)."""
    n = 0
    while n < limit and j + n < len(es) and k + n < len(rs) and es[j + n][1][3] == rs[k + n][3]:
        n += 1
    return n


def _replay_activities(doc: dict[str, Any]) -> list[tuple]:
    return sorted(_activity(e) for e in doc["traceEvents"]
                  if e.get("ph") == "X" and e.get("cat", "") in _DEVICE_CATS)


def _trace_files(paths: list[str]) -> list[str]:
    files: list[str] = []
    for p in paths:
        if os.path.isdir(p):
            found = sorted(f for f in os.listdir(p) if f.startswith("rank")
                           and f.endswith(".json"))
            if not found:
                raise ExplainError(f"{p}: no rank<r>.json files in this directory (write "
                                   "them with `distir run FILE --profile DIR`)")
            files += [os.path.join(p, f) for f in found]
        else:
            files.append(p)
    return files


def _by_rank(files: list[str]) -> dict[int, tuple[str, dict[str, Any]]]:
    raw: dict[int, tuple[str, dict[str, Any]]] = {}
    for path in files:
        doc = _read(path)
        rank = int(doc["distir"].get("rank", -1))
        if rank in raw:
            raise ExplainError(f"{path}: a second trace of rank {rank} (the first is "
                               f"{raw[rank][0]}); give one file per rank")
        raw[rank] = (path, doc)
    return raw


def _check_ops(path: str, r: int, doc: dict[str, Any], ops: Any) -> None:
    got = list(doc["distir"].get("op_types", []))
    want = [op.op_type for op in ops]
    if got != want:
        first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b),
                     min(len(got), len(want)))
        # The same ops with some folded into constants on one side only: the run's
        # program knew small initializers (its .npz) that this reading does not, or back
        folded = len(got) == len(want) and all(
            a == b or "Constant" in (a, b) for a, b in zip(got, want))
        fix = ("read the program with the same weights (.npz) beside it as when it ran: "
               "small initializers are folded into constants" if folded else
               "profile this program with `distir run FILE --profile DIR`")
        raise ExplainError(
            f"{path}: rank {r}'s trace does not match the program: it ran {len(got)} "
            f"ops, the program's rank {r} has {len(want)} (first difference at op "
            f"{first}: {got[first] if first < len(got) else 'none'} vs "
            f"{want[first] if first < len(want) else 'none'}); {fix}")


def load_traces(paths: list[str], proj: Projection, replay: list[str] | None = None,
                ) -> dict[int, RankTrace]:
    """Read the traces (files, or directories of ``rank<r>.json`` files) of a profiled run
    of ``proj``'s program; checks that every rank with ops is there and that each trace's
    ops are its rank's program's ops. With ``replay`` (the traces of ``distir run
    --cuda-graph --profile`` of the same program), each op is timed by the kernels of the
    replayed graph that ``align_replay`` matches to the kernels its range launched in the
    marked eager step (a GPU's traces only); each rank's ``info`` then has
    ``replay_step_s`` (the replayed step's duration), ``replay_unmatched`` (eager and
    replay activities left unmatched, which are not counted) and ``replay_kernel_s``
    (the replay's compute activities, summed)."""
    files = _trace_files(paths)
    raw = _by_rank(files)
    rraw = _by_rank(_trace_files(replay)) if replay else None
    need = [p.device for p in proj.programs if p.fn.ops]
    missing = [r for r in need if r not in raw]
    if missing:
        raise ExplainError(f"no trace of rank(s) {missing} of @{proj.name} among "
                           f"{len(files)} file(s); give every DIR/rank<r>.json that "
                           "`distir run --profile DIR` wrote")
    origin = None
    out: dict[int, RankTrace] = {}
    parsed = {}
    for r in need:
        path, doc = raw[r]
        ops = proj.programs[r].fn.ops
        _check_ops(path, r, doc, ops)
        ranges, by_op = _rank_events(doc, path)
        if not ranges:
            raise ExplainError(f"{path}: no distir#I op ranges in the trace; profile the "
                               "program with `distir run FILE --profile DIR`")
        if rraw is not None:
            by_op = _replayed(r, rraw, doc, by_op, ops)
        parsed[r] = (path, doc, ranges, by_op)
        # (On a GPU the timeline is the device's: its first activity is the origin.)
        t0 = min(a[0] for v in by_op.values() for a in v) if by_op else ranges[0][0]
        origin = t0 if origin is None else min(origin, t0)
    for r, (path, doc, ranges, by_op) in parsed.items():
        out[r] = _spans(r, path, doc["distir"], ranges, by_op, origin or 0.0,
                        proj.programs[r].fn.ops)
    return out


def _replayed(r: int, rraw: dict[int, tuple[str, dict[str, Any]]], doc: dict[str, Any],
              by_op: dict[int, list], ops: Any) -> dict[int, list]:
    """``by_op`` with the replay's activities (``align_replay``); notes in ``doc``'s info."""
    if r not in rraw:
        raise ExplainError(f"no replay trace of rank {r} among the --replay files; give "
                           "every DIR/rank<r>.json that `distir run --cuda-graph --profile "
                           "DIR` wrote")
    rpath, rdoc = rraw[r]
    _check_ops(rpath, r, rdoc, ops)
    if not by_op:
        raise ExplainError(f"rank {r}'s marked trace has no device activity: a replay "
                           "can be aligned with a GPU's traces only")
    acts = _replay_activities(rdoc)
    if not acts:
        raise ExplainError(f"{rpath}: no device activity in the trace; write it with "
                           "`distir run FILE --cuda-graph --profile DIR` on a GPU")
    aligned, lost_e, lost_r = align_replay(by_op, acts)
    info = doc["distir"]
    info["replay_step_s"] = float(rdoc["distir"].get("step_s", 0.0))
    info["replay_unmatched"] = (lost_e, lost_r)
    info["replay_kernel_s"] = sum(a[1] for a in acts if not _is_comm(a[3])) / 1e6
    info["eager_step_s"] = float(info.get("step_s", 0.0))
    info["step_s"] = info["replay_step_s"]
    return aligned


def _spans(r: int, path: str, info: dict[str, Any], ranges: list[tuple],
           by_op: dict[int, list], origin: float, ops: Any) -> RankTrace:
    own: dict[int, tuple[float, float]] = {}
    waits: dict[int, float] = defaultdict(float)
    wait_end: dict[int, float] = {}
    for ts, dur, i, kind, is_wait, _ in ranges:
        if i >= len(ops) or ops[i].op_type != kind:
            raise ExplainError(f"{path}: range 'distir#{i} {kind}' is not op {i} of rank "
                               f"{r}'s program; profile this program with `distir run "
                               "FILE --profile DIR`")
        if is_wait:
            waits[i] += dur
            wait_end[i] = max(wait_end.get(i, 0.0), ts + dur)
        else:
            own[i] = (ts, dur)
    absent = [i for i in range(len(ops)) if i not in own]
    if absent:
        raise ExplainError(f"{path}: rank {r}'s trace lacks op {absent[0]} "
                           f"({ops[absent[0]].op_type}); was the profiled step cut short?")
    rt = RankTrace(r, path, info)
    gpu = bool(by_op) or "cuda" in str(info.get("backend", "")) or \
        str(info.get("backend", "")) == "nccl"
    prev_end = 0.0
    for i, op in enumerate(ops):
        comm = op.op_type in ASYNC_OPS
        if gpu:
            acts = by_op.get(i, [])
            if acts:
                start = (min(a[0] for a in acts) - origin) / 1e6
                end = (max(a[0] + a[1] for a in acts) - origin) / 1e6
                secs = sum(a[1] for a in acts) / 1e6
            else:
                start = end = prev_end
                secs = 0.0
        else:
            ts, dur = own[i]
            start = (ts - origin) / 1e6
            end = (max(ts + dur, wait_end.get(i, 0.0)) - origin) / 1e6
            secs = (dur + waits.get(i, 0.0)) / 1e6
        if not comm:
            prev_end = end
        rt.spans[i] = Span(r, i, op.op_type, start, secs, end, comm)
    return rt


def simulated_spans(sim: Simulation, proj: Projection) -> tuple[dict[tuple[int, int], Span],
                                                                 dict[int, int]]:
    """The simulation's op times per (device, index in the device's projected program), and
    per device the number of simulated ops that no projected op matched (folded)."""
    per_dev: dict[int, list[tuple[str, float, float, bool]]] = defaultdict(list)
    for start, secs, devs, op, detail, _ in sim.events():
        kind = op.op_type
        is_comm = kind in COMM_OPS
        single = is_comm and len(set(devs)) == 1
        src = devs[0] if devs else -1
        if kind == "Send" and detail[1] and detail[1][0] is not None:
            src = int(getattr(detail[1][0], "device", src))
        for d in dict.fromkeys(devs):
            k = "Identity" if single else ("Recv" if kind == "Send" and d != src else kind)
            per_dev[d].append((k, start, secs, kind in ASYNC_OPS))
    spans: dict[tuple[int, int], Span] = {}
    unmatched: dict[int, int] = {}
    for prog in proj.programs:
        d = prog.device
        sim_ops = per_dev.get(d, [])
        ops = prog.fn.ops
        i = j = 0
        skipped = 0
        while j < len(ops):
            kind = ops[j].op_type
            if i < len(sim_ops) and sim_ops[i][0] == kind:
                _, start, secs, comm = sim_ops[i]
                spans[(d, j)] = Span(d, j, kind, start, secs, start + secs, comm)
                i += 1
                j += 1
            elif kind == "Constant" or i >= len(sim_ops):  # folded, or not simulated
                prev = spans.get((d, j - 1))
                t = prev.end if prev is not None else 0.0
                spans[(d, j)] = Span(d, j, kind, t, 0.0, t)
                j += 1
            else:  # simulated, folded away by the projection
                skipped += 1
                i += 1
        unmatched[d] = skipped + len(sim_ops) - i
    return spans, unmatched


def _dependencies(proj: Projection) -> dict[tuple[int, int], list[tuple[int, int]]]:
    """Per (device, op index): the ops it waits for on its device (the previous op on its
    stream, the previous compute op for an asynchronous collective, and the producers of
    its inputs); for a communication op, those of every participant too."""
    deps: dict[tuple[int, int], list[tuple[int, int]]] = {}
    by_seq: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for prog in proj.programs:
        d = prog.device
        made: dict[int, int] = {}
        last = last_async = -1  # the previous op on the compute / communication stream
        for i, op in enumerate(prog.fn.ops):
            asy = op.op_type in ASYNC_OPS
            own = [(d, j) for j in (last, last_async if asy else -1) if j >= 0]
            own += [(d, made[id(v)]) for v in op.inputs if v is not None and id(v) in made]
            deps[(d, i)] = list(dict.fromkeys(own))
            for v in op.outputs:
                made[id(v)] = i
            if asy:
                last_async = i
            else:
                last = i
            seq = op.attrs.get("seq")
            if isinstance(seq, int):
                by_seq[seq].append((d, i))
    for members in by_seq.values():
        union = list(dict.fromkeys(x for m in members for x in deps[m]))
        for m in members:
            deps[m] = union
    return deps


def critical_path(spans: dict[tuple[int, int], Span],
                  deps: dict[tuple[int, int], list[tuple[int, int]]]) -> list[Span]:
    """The chain of ops that ends last, first op first (see the module docstring)."""
    if not spans:
        return []
    cur = max(spans, key=lambda k: (spans[k].end, -k[0]))
    path = [spans[cur]]
    seen = {cur}
    while True:
        cands = [k for k in deps.get(cur, ()) if k in spans and k not in seen]
        if not cands:
            break
        cur = max(cands, key=lambda k: (spans[k].end, k))
        seen.add(cur)
        path.append(spans[cur])
    path.reverse()
    return path


@dataclass(slots=True)
class Explanation:
    """The comparison. ``kinds[kind]`` = (op count, simulated s, measured s) summed over
    devices; ``devices[d]`` = (simulated busy s, measured busy s, simulated step s, measured
    step s); ``critical`` = (simulated path, measured path); ``ops``: every aligned op as
    (device, index, kind, simulated s, measured s), largest absolute difference first."""

    function: str
    hardware: str
    measured_on: str
    simulated_latency_s: float
    measured_latency_s: float
    kinds: dict[str, tuple[int, float, float]]
    devices: dict[int, tuple[float, float, float, float]]
    critical: tuple[list[Span], list[Span]]
    ops: list[tuple[int, int, str, float, float]]
    sim_spans: dict[tuple[int, int], Span]
    measured_spans: dict[tuple[int, int], Span]
    folded: dict[int, int]
    replay: dict[int, dict[str, Any]] = field(default_factory=dict)
    """Per rank, with replay traces: ``step_s`` (the replayed step), ``kernel_s`` (its
    compute activities summed), ``eager_step_s`` (the marked eager step) and
    ``unmatched`` (eager, replay activities that ``align_replay`` left out)."""

    def path_by_kind(self, which: int) -> dict[str, float]:
        """Seconds of the critical path (0: simulated, 1: measured) per op kind: each op
        counts from its predecessor's end (the first from its own start) to its own end, so
        the kinds add up to the path's length, its last end minus its first start."""
        out: dict[str, float] = defaultdict(float)
        prev: float | None = None
        for s in self.critical[which]:
            out[s.kind] += max(s.end - (s.start if prev is None else prev), 0.0)
            prev = s.end if prev is None else max(prev, s.end)
        return dict(out)

    def to_dict(self, top: int = 20) -> dict[str, Any]:
        sp, mp = self.path_by_kind(0), self.path_by_kind(1)
        return {
            "function": self.function, "hardware": self.hardware,
            "measured_on": self.measured_on,
            "simulated_latency_s": self.simulated_latency_s,
            "measured_latency_s": self.measured_latency_s,
            "kinds": [{"kind": k, "ops": n, "simulated_s": s, "measured_s": m,
                       "simulated_critical_s": sp.get(k, 0.0),
                       "measured_critical_s": mp.get(k, 0.0)}
                      for k, (n, s, m) in self.kinds.items()],
            "devices": [{"device": d, "simulated_busy_s": a, "measured_busy_s": b,
                         "simulated_step_s": c, "measured_step_s": e}
                        for d, (a, b, c, e) in self.devices.items()],
            "critical_path": {
                name: [{"device": s.device, "op": s.index, "kind": s.kind,
                        "start_s": s.start, "seconds": s.seconds} for s in path]
                for name, path in zip(("simulated", "measured"), self.critical)},
            "largest_differences": [{"device": d, "op": i, "kind": k, "simulated_s": s,
                                     "measured_s": m} for d, i, k, s, m in self.ops[:top]],
            "folded_simulated_ops": {str(d): n for d, n in self.folded.items() if n},
            **({"replay": {str(d): v for d, v in self.replay.items()}} if self.replay else {}),
        }


def explain(fn: Function, paths: list[str], hardware: Any = "h100-sxm",
            replay: list[str] | None = None) -> Explanation:
    """Align the traces at ``paths`` (``distir run --profile``) of ``fn`` with its
    simulation on ``hardware`` (see the module docstring). With ``replay`` (the traces of
    ``distir run --cuda-graph --profile``), the measured times are the replayed graph's
    (``load_traces``), and the simulation is without host dispatch, as for a graph."""
    import distir
    from distir.analysis.hardware import load_hardware
    from distir.analysis.projection import project

    proj = project(fn)
    traces = load_traces(paths, proj, replay)
    hw = load_hardware(hardware)
    sim = distir.simulate(fn, hw.for_cuda_graphs() if replay else hw)
    sim_spans, folded = simulated_spans(sim, proj)
    meas: dict[tuple[int, int], Span] = {}
    for r, t in traces.items():
        for i, s in t.spans.items():
            meas[(r, i)] = s
    kinds: dict[str, list[float]] = {}
    ops = []
    for key, m in meas.items():
        sp = sim_spans.get(key)
        ss = sp.seconds if sp is not None else 0.0
        k = kinds.setdefault(m.kind, [0, 0.0, 0.0])
        k[0] += 1
        k[1] += ss
        k[2] += m.seconds
        ops.append((key[0], key[1], m.kind, ss, m.seconds))
    ops.sort(key=lambda x: (-abs(x[4] - x[3]), x[0], x[1]))
    kind_rows = {k: (int(v[0]), v[1], v[2]) for k, v in
                 sorted(kinds.items(), key=lambda kv: (-abs(kv[1][2] - kv[1][1]), kv[0]))}
    devices: dict[int, tuple[float, float, float, float]] = {}
    for r in sorted(traces):
        sb = sum(s.seconds for (d, _), s in sim_spans.items() if d == r)
        mb = sum(s.seconds for s in traces[r].spans.values())
        sstep = max((s.end for (d, _), s in sim_spans.items() if d == r), default=0.0)
        devices[r] = (sb, mb, sstep, float(traces[r].info.get("step_s", 0.0)))
    deps = _dependencies(proj)
    crit = (critical_path(sim_spans, deps), critical_path(meas, deps))
    measured_on = str(next(iter(traces.values())).info.get("device", "")) if traces else ""
    rep = {r: {"step_s": t.info["replay_step_s"], "kernel_s": t.info["replay_kernel_s"],
               "eager_step_s": t.info["eager_step_s"],
               "unmatched": list(t.info["replay_unmatched"])}
           for r, t in traces.items() if "replay_step_s" in t.info}
    return Explanation(fn.name, sim.hardware.name, measured_on, sim.latency_s,
                       max((v[3] for v in devices.values()), default=0.0), kind_rows,
                       devices, crit, ops, sim_spans, meas, folded, rep)


def _ms(s: float) -> str:
    return f"{s * 1e3:.3f}"


def _diff(s: float, m: float) -> str:
    return f"{(s - m) / m * 100:+.0f}%" if m > 0 else "n/a"


def format_table(ex: Explanation, top: int = 15) -> str:
    """The comparison as text tables (milliseconds; difference = simulated vs measured)."""
    sp, mp = ex.path_by_kind(0), ex.path_by_kind(1)
    lines = [f"@{ex.function}: simulated on {ex.hardware}, measured on {ex.measured_on}",
             f"step: simulated {_ms(ex.simulated_latency_s)} ms, measured "
             f"{_ms(ex.measured_latency_s)} ms (the profiled step's slowest rank), "
             f"{_diff(ex.simulated_latency_s, ex.measured_latency_s)}", "",
             *_replay_lines(ex),
             "per op kind, summed over devices (ms), largest difference first:",
             f"{'kind':<22}{'ops':>5}{'simulated':>12}{'measured':>12}{'diff':>8}"
             f"{'crit sim':>11}{'crit meas':>11}"]
    for k, (n, s, m) in ex.kinds.items():
        lines.append(f"{k:<22}{n:>5}{_ms(s):>12}{_ms(m):>12}{_diff(s, m):>8}"
                     f"{_ms(sp.get(k, 0.0)):>11}{_ms(mp.get(k, 0.0)):>11}")
    lines += ["", "per device (ms): busy = sum of its ops' times; step = when it finished:",
              f"{'device':>6}{'sim busy':>11}{'meas busy':>11}{'diff':>8}{'sim step':>11}"
              f"{'meas step':>11}"]
    for d, (sb, mb, ss, ms) in ex.devices.items():
        lines.append(f"{d:>6}{_ms(sb):>11}{_ms(mb):>11}{_diff(sb, mb):>8}{_ms(ss):>11}"
                     f"{_ms(ms):>11}")
    for w, (name, path) in enumerate(zip(("simulated", "measured"), ex.critical)):
        total = sum(ex.path_by_kind(w).values())
        devs = sorted({s.device for s in path})
        lines.append(f"\ncritical path, {name}: {len(path)} ops over devices {devs}, "
                     f"{_ms(total)} ms long")
    lines += ["", f"largest differences (ms), {min(top, len(ex.ops))} of {len(ex.ops)} ops:",
              f"{'device':>6}{'op':>6}  {'kind':<22}{'simulated':>12}{'measured':>12}"
              f"{'diff':>8}"]
    for d, i, k, s, m in ex.ops[:top]:
        lines.append(f"{d:>6}{i:>6}  {k:<22}{_ms(s):>12}{_ms(m):>12}{_diff(s, m):>8}")
    folded = sum(ex.folded.values())
    if folded:
        lines.append(f"\n({folded} simulated op(s) were folded into constants by the "
                     "projection and never ran)")
    return "\n".join(lines)


def _replay_lines(ex: Explanation) -> list[str]:
    """With replay traces: per rank, the replayed step beside its compute kernels' sum
    (the rest is the stream's idle time: gaps between kernels, waits for peers)."""
    if not ex.replay:
        return []
    out = ["measured: a replayed CUDA graph, each op timed by the graph's kernels matched "
           "to its eager ones (ms):",
           f"{'rank':>6}{'replay step':>13}{'compute kernels':>17}{'idle':>8}"
           f"{'eager step':>12}{'unmatched e/r':>15}"]
    for r, v in sorted(ex.replay.items()):
        idle = 1.0 - v["kernel_s"] / v["step_s"] if v["step_s"] > 0 else float("nan")
        out.append(f"{r:>6}{_ms(v['step_s']):>13}{_ms(v['kernel_s']):>17}{idle * 100:>7.1f}%"
                   f"{_ms(v['eager_step_s']):>12}{v['unmatched'][0]:>8}/{v['unmatched'][1]}")
    return out + [""]


def perfetto_events(ex: Explanation) -> list[dict[str, Any]]:
    """Both timelines as Chrome trace events: process 0 simulated, process 1 measured, one
    track per device and one per communication stream; ``ts``/``dur`` in microseconds."""
    evs: list[dict[str, Any]] = []
    crit = [{(s.device, s.index) for s in path} for path in ex.critical]
    for pid, (label, spans) in enumerate(
            ((f"simulated: @{ex.function} on {ex.hardware}", ex.sim_spans),
             (f"measured: @{ex.function} on {ex.measured_on}", ex.measured_spans))):
        evs.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                    "args": {"name": label}})
        evs.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0,
                    "args": {"sort_index": pid}})
        tracks = sorted({(s.device, s.comm) for s in spans.values()})
        for d, comm in tracks:
            tid = 2 * d + int(comm)
            evs.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                        "args": {"name": f"device {d}" + (" comm" if comm else "")}})
            evs.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
                        "args": {"sort_index": tid}})
        other = ex.measured_spans if pid == 0 else ex.sim_spans
        for key, s in sorted(spans.items()):
            o = other.get(key)
            evs.append({"name": s.kind, "cat": "critical" if key in crit[pid] else "op",
                        "ph": "X", "pid": pid, "tid": 2 * s.device + int(s.comm),
                        "ts": s.start * 1e6, "dur": max(s.end - s.start, 0.0) * 1e6,
                        "args": {"op": s.index, "device": s.device, "seconds": s.seconds,
                                 "other_timeline_s": None if o is None else o.seconds,
                                 "on_critical_path": key in crit[pid]}})
    return evs


def write_perfetto(ex: Explanation, path: str) -> None:
    """Write both timelines to ``path`` (opens in ui.perfetto.dev or chrome://tracing)."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"displayTimeUnit": "ns", "otherData": ex.to_dict(top=0),
                   "traceEvents": perfetto_events(ex)}, f)
