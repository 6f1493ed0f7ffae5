"""What a measured step's GPUs did: a summary of unmarked ``torch.profiler`` traces
(``study measure --profile DIR --profile-kernels``), to tell a step bound by its kernels
from one bound by its host.

For each rank's trace (``rank{r}.json``, one profiled step) it reports, within the step
(see the first item; without a recorded step time, the profiler's ``ProfilerStep#``
range, else the span of the trace's events):

- the step's wall time as the timed steps measure it (``distir.step_s``: the window is
  then the ``step_s`` before the step's last kernel ends, which leaves out the barrier
  that the recorded range also holds) and the span;
- the time the GPU ran compute kernels (the union of their intervals), ran NCCL kernels,
  ran any kernel, and ran none;
- the host's CUDA runtime calls that block it (``cudaStreamSynchronize``,
  ``cudaDeviceSynchronize``, ``cudaEventSynchronize``, synchronous copies): count and time;
- the kernels launched, and the longest stretches of the step when the compute stream
  was idle, with the runtime call the host was in at the time.

    python -m grid_search.kernel_timeline DIR [DIR ...] [-o SUMMARY.json]

where each ``DIR`` holds one configuration's ``rank*.json``; prints a table, one row per
rank.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
from typing import Any

__all__ = ["summarize_rank", "summarize_dir"]

_BLOCKING = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
             "cudaMemcpy")
"""Runtime calls that wait for the device (``cudaMemcpy*``: the synchronous copies, not the
``Async`` ones)."""


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            if b > out[-1][1]:
                out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def _clip(spans: list[tuple[float, float]], lo: float, hi: float) -> list[tuple[float, float]]:
    return [(max(a, lo), min(b, hi)) for a, b in spans if b > lo and a < hi]


def _total(spans: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in spans)


def summarize_rank(doc: dict[str, Any], top: int = 8) -> dict[str, Any]:
    """The summary of one rank's trace (times in seconds; see the module docstring)."""
    events = [e for e in doc.get("traceEvents", []) if e.get("ph") == "X" and "dur" in e]
    info = doc.get("distir", {})
    steps = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    if steps:
        lo = min(float(e["ts"]) for e in steps)
        hi = max(float(e["ts"]) + float(e["dur"]) for e in steps)
    else:
        lo = min((float(e["ts"]) for e in events), default=0.0)
        hi = max((float(e["ts"]) + float(e["dur"]) for e in events), default=0.0)
    # The trace holds one step: its kernels are those that start in it or after (the
    # host may be far ahead of them); any before it are the warm-up's.
    kernels = [e for e in events if e.get("cat") == "kernel" and float(e["ts"]) >= lo]
    end = max((float(e["ts"]) + float(e["dur"]) for e in kernels), default=hi)
    if info.get("step_s"):
        # The timed step ends with its last kernel and lasts ``step_s``: the recorded range
        # also holds the barrier before it, whose wait is not the step's.
        lo, hi = max(lo, end - float(info["step_s"]) * 1e6), end
        kernels = [e for e in kernels if float(e["ts"]) + float(e["dur"]) > lo]
    nccl = [(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in kernels
            if "nccl" in str(e.get("name", "")).lower()]
    compute = [(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in kernels
               if "nccl" not in str(e.get("name", "")).lower()]
    # The step's kernels: a kernel launched in the step may run after the host's range.
    k_hi = max([hi] + [b for _, b in compute + nccl])
    comp_u = _union(_clip(compute, lo, k_hi))
    nccl_u = _union(_clip(nccl, lo, k_hi))
    any_u = _union(comp_u + nccl_u)
    runtime = [e for e in events if e.get("cat") == "cuda_runtime"
               and float(e["ts"]) < k_hi and float(e["ts"]) + float(e["dur"]) > lo]
    blocking: dict[str, list[float]] = {}
    for e in runtime:
        name = str(e.get("name", ""))
        if name.startswith(_BLOCKING) and "Async" not in name:
            b = blocking.setdefault(name, [0, 0.0])
            b[0] += 1
            b[1] += float(e["dur"]) * 1e-6
    # Idle stretches of the compute stream(s), with what the host was doing meanwhile.
    gaps = []
    prev = lo
    for a, b in comp_u + [(k_hi, k_hi)]:
        if a - prev > 0:
            gaps.append((prev, a))
        prev = max(prev, b)
    gaps.sort(key=lambda g: g[0] - g[1])
    longest = []
    for a, b in gaps[:top]:
        inside = [e for e in runtime if float(e["ts"]) < b and float(e["ts"]) + float(e["dur"]) > a]
        calls: dict[str, float] = {}
        for e in inside:
            x = min(b, float(e["ts"]) + float(e["dur"])) - max(a, float(e["ts"]))
            calls[str(e["name"])] = calls.get(str(e["name"]), 0.0) + x * 1e-6
        main = max(calls.items(), key=lambda kv: kv[1]) if calls else ("", 0.0)
        longest.append({"at_s": (a - lo) * 1e-6, "idle_s": (b - a) * 1e-6,
                        "host_in": main[0], "host_in_s": main[1]})
    return {
        "rank": info.get("rank"), "program": info.get("program"),
        "step_s": info.get("step_s"), "span_s": (k_hi - lo) * 1e-6,
        "compute_busy_s": _total(comp_u) * 1e-6, "nccl_busy_s": _total(nccl_u) * 1e-6,
        "any_kernel_s": _total(any_u) * 1e-6,
        "idle_s": ((k_hi - lo) - _total(any_u)) * 1e-6,
        "kernels": len(kernels), "launches": sum(
            1 for e in runtime if str(e.get("name", "")).startswith("cudaLaunchKernel")),
        "blocking": {k: {"calls": int(v[0]), "s": v[1]} for k, v in sorted(blocking.items())},
        "compute_idle_gaps": longest,
    }


def summarize_dir(path: str) -> list[dict[str, Any]]:
    """The summaries of every ``rank*.json`` in ``path``, by rank."""
    out = []
    for f in sorted(glob.glob(os.path.join(path, "rank*.json"))):
        with open(f, encoding="utf-8") as fh:
            out.append(dict(summarize_rank(json.load(fh)), config=os.path.basename(path)))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("-o", "--out", default=None, help="write every summary as JSON")
    args = ap.parse_args(argv)
    rows = [r for d in args.dirs for r in summarize_dir(d)]
    print(f"{'config':24} {'rank':>4} {'step ms':>8} {'span ms':>8} {'compute':>8} "
          f"{'nccl':>8} {'no kernel':>9} {'kernels':>7} {'blocking ms':>11}  longest idle")
    for r in rows:
        blk = sum(v["s"] for v in r["blocking"].values()) * 1e3
        g = r["compute_idle_gaps"][0] if r["compute_idle_gaps"] else None
        gap = "" if g is None else f"{g['idle_s'] * 1e3:.2f} ms ({g['host_in'] or '-'})"
        step = r["step_s"] * 1e3 if r["step_s"] else float("nan")
        print(f"{r['config']:24} {r['rank']!s:>4} {step:8.2f} {r['span_s'] * 1e3:8.2f} "
              f"{r['compute_busy_s'] * 1e3:8.2f} {r['nccl_busy_s'] * 1e3:8.2f} "
              f"{r['idle_s'] * 1e3:9.2f} {r['kernels']:7d} {blk:11.2f}  {gap}")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
