"""How much an asynchronous all-reduce slows the compute that overlaps it.

The simulator runs ``MPIAllreduce`` on each device's communication stream beside its compute
(``distir.ir.schemas.ASYNC_OPS``). The two share the GPU's SMs and memory bandwidth, so the
overlap is not free: the profile's ``interconnect.overlap_slowdown`` is the compute time lost
per second of collective, and the simulator adds it to each device's compute clock.

Measured on ``world`` processes (all local GPUs, or CPU processes over gloo), for several
message sizes, each the median of ``trials`` trials started at a barrier and ended when every
rank is done (perf_counter around a device synchronization, the slowest rank's time):

- ``t_comm``: the all-reduce alone;
- ``t_compute``: ``reps`` matrix products, chosen to last about 2.5 x ``t_comm`` (``--ratio``);
- ``t_both``: the all-reduce started with ``async_op=True``, then the products, then a wait.

With the compute longer than the collective, the simulator's model says
``t_both = t_compute + slowdown * t_comm``; each size gives ``slowdown = (t_both -
t_compute) / t_comm``, and the profile gets their median (clipped to [0, 1]).

    python -m calibration.overlap                         # all GPUs; prints the table
    python -m calibration.overlap --profile calibration/profiles/h200-sxm.json
    python -m calibration.overlap --cpu --world 2         # gloo smoke test
    python -m calibration.overlap --cuda-graph            # each run replayed as a CUDA graph
    python -m calibration.overlap --ratio 0.4             # compute shorter than the collective

``--profile`` writes the median into that profile (in place, or to ``--write``).

The collective's own slowdown (the profile's ``interconnect.overlap_comm_slowdown``): with
``--memory --ratio 0.4`` the bandwidth-bound kernel (an elementwise sum) is shorter than
the all-reduce, and the pair ends later than the all-reduce alone. The simulator stretches
a collective by ``overlap_comm_slowdown`` x the bandwidth-bound compute beside it, that
compute starting after the ``overlap_slowdown`` it loses (``distir.analysis.trace.
replay``); each such row gives ``(t_both - t_comm) / min(t_compute, (1 - overlap_slowdown)
* t_comm)``, and ``comm_slowdown`` their median. From measurements already taken (the
JSON files of ``--json``), without a GPU:

    python -m calibration.overlap --fit-comm r0.4_graph_1.json r0.4_graph_2.json \
        --overlap-slowdown 0.3738 [--profile calibration/profiles/h200-sxm-graph.json]

``--cuda-graph`` captures each of the three runs (the all-reduce, the products, both) once
as a CUDA graph, after two eager warm-ups, and times its replays, as the backend times a
step with ``cuda_graph=True``: the host then launches nothing between the kernels, so the
figure is the one a device-time profile (``--device-time``) wants.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from calibration.comm import SAFE_ENV, _free_port

__all__ = ["measure_overlap", "slowdown", "comm_slowdown", "write_profile", "main"]

GPU_SIZES = [32 << 20, 64 << 20, 128 << 20, 256 << 20]
CPU_SIZES = [1 << 20, 4 << 20]


def measure_overlap(world: int, backend: str, sizes: list[int], *, trials: int = 7,
                    timeout_s: float = 300.0, cuda_graph: bool = False,
                    memory: bool = False, ratio: float = 2.5) -> list[dict[str, Any]]:
    """One row per message size: ``bytes``, ``t_comm``, ``t_compute``, ``t_both``,
    ``reps`` (kernels per run), ``slowdown``, ``device``, ``group_size``, ``cuda_graph``
    (each run replayed as a CUDA graph: NCCL only), ``compute`` (``"mm"``: matrix
    products); with ``memory``, as many rows again beside a bandwidth-bound kernel
    (``"memory"``: an elementwise sum of 128 MiB tensors). The compute lasts about
    ``ratio`` x the all-reduce alone: below 1 the all-reduce is the longer, and ``t_both``
    over ``t_comm`` shows how much the compute beside it slows the collective itself
    (the simulator keeps an overlapped collective at its time alone)."""
    if ratio <= 0:
        raise ValueError(f"ratio must be positive, got {ratio}")
    if cuda_graph and backend != "nccl":
        raise ValueError("--cuda-graph needs GPUs (NCCL): gloo collectives cannot be captured")
    import torch.multiprocessing as mp

    os.environ.update(SAFE_ENV)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rows.json")
        mp.spawn(_worker, args=(world, backend, sizes, trials, _free_port(), out, timeout_s,
                                cuda_graph, memory, ratio), nprocs=world, join=True)
        with open(out, encoding="utf-8") as f:
            rows: list[dict[str, Any]] = json.load(f)
    return rows


def slowdown(rows: list[dict[str, Any]], compute: str = "mm") -> float:
    """The profile's ``overlap_slowdown``: the median over sizes of the rows beside
    ``compute`` kernels (matrix products by default; rows without the key count as
    such), clipped to [0, 1]."""
    xs = [r["slowdown"] for r in rows if r.get("compute", "mm") == compute]
    if not xs:
        raise ValueError(f"no overlap measurements beside {compute!r} kernels")
    return min(1.0, max(0.0, statistics.median(xs)))


def comm_slowdown(rows: list[dict[str, Any]], overlap_slowdown: float,
                  compute: str = "memory") -> float:
    """The profile's ``overlap_comm_slowdown``: over the rows beside ``compute`` kernels
    (the bandwidth-bound sum by default) shorter than the all-reduce, the median of the
    all-reduce's extra time per second of compute beside it, ``(t_both - t_comm) /
    min(t_compute, (1 - overlap_slowdown) * t_comm)`` (the simulator starts that compute
    ``overlap_slowdown * t_comm`` late, so only that much of it runs beside the
    collective), floored at 0."""
    xs = [(r["t_both"] - r["t_comm"])
          / min(r["t_compute"], (1.0 - overlap_slowdown) * r["t_comm"])
          for r in rows if r.get("compute", "mm") == compute and r["t_compute"] < r["t_comm"]]
    if not xs or not 0.0 <= overlap_slowdown < 1.0:
        raise ValueError(f"no all-reduce longer than the {compute!r} kernels beside it "
                         "(measure with --memory --ratio 0.4), or overlap_slowdown "
                         f"{overlap_slowdown} outside [0, 1)")
    return max(0.0, statistics.median(xs))


def write_profile(path: str, value: float, out: str | None = None,
                  key: str = "overlap_slowdown", note: str | None = None) -> None:
    """Set ``interconnect.<key>`` (``overlap_slowdown`` or ``overlap_comm_slowdown``) of
    the profile at ``path`` (written to ``out``, by default in place), checked by loading
    it back; ``note``, where given, replaces the profile's comment on ``key`` (the one
    starting with it) or is added to its comments."""
    from calibration.calibrate import dumps_profile
    from distir.analysis.hardware import Hardware

    data = json.loads(Path(path).read_text(encoding="utf-8"))
    data["interconnect"][key] = round(value, 4)
    if note is not None:
        comments = [c for c in data.get("comment", []) if not c.startswith(f"{key} ")]
        data["comment"] = [*comments, f"{key} {note}"]
    Hardware.from_json(data, path)
    Path(out or path).write_text(dumps_profile(data) + "\n", encoding="utf-8")


def _worker(rank: int, world: int, backend: str, sizes: list[int], trials: int, port: int,
            out: str, timeout_s: float, cuda_graph: bool = False,
            memory: bool = False, ratio: float = 2.5) -> None:
    import datetime

    import torch
    import torch.distributed as dist

    os.environ.update(SAFE_ENV)
    cuda = backend == "nccl"
    if cuda:
        torch.cuda.set_device(rank)
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=timeout_s))
    try:
        rows = _measure(rank, device, sizes, trials, cuda_graph, memory, ratio)
        if rank == 0:
            with open(out, "w", encoding="utf-8") as f:
                json.dump(rows, f)
    finally:
        dist.destroy_process_group()


def _measure(rank: int, device: Any, sizes: list[int], trials: int,
             cuda_graph: bool = False, memory: bool = False, ratio: float = 2.5,
             ) -> list[dict[str, Any]]:
    import torch
    import torch.distributed as dist

    cuda = device.type == "cuda"
    # The products of a large layer's backward: float16 on GPUs, small float32 on CPUs.
    dt, n = (torch.float16, 8192) if cuda else (torch.float32, 256)
    a = torch.randn(n // 2, n, dtype=dt, device=device)
    b = torch.randn(n, n, dtype=dt, device=device)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    graphs: list[Any] = []  # kept alive (with their pools) until the sizes are done

    def replayed(fn: Any) -> Any:
        """``fn`` captured once as a CUDA graph (its collective included), after two eager
        warm-ups on the capturing stream; returns the graph's replay."""
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            fn()
            fn()
        torch.cuda.current_stream(device).wait_stream(side)
        sync()
        g = torch.cuda.CUDAGraph()
        # Thread-local, as the backend captures: NCCL's watchdog may query earlier events.
        with torch.cuda.graph(g, capture_error_mode="thread_local"):
            fn()
        graphs.append(g)
        return g.replay

    def slowest(fn: Any) -> float:
        """The median over trials of the slowest rank's time of ``fn`` (of its replay as
        a CUDA graph with ``cuda_graph``)."""
        if cuda_graph:
            fn = replayed(fn)
        fn()
        samples = []
        for _ in range(trials):
            sync()
            dist.barrier()
            t0 = time.perf_counter()
            fn()
            sync()
            t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64, device=device)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            samples.append(float(t.item()))
        return statistics.median(samples)

    kernels: dict[str, Any] = {"mm": lambda: torch.mm(a, b)}
    if memory:  # a bandwidth-bound kernel: an elementwise sum of two large tensors
        m = (128 << 20) // 2 if cuda else (4 << 20) // 4
        x, y, z = (torch.ones(m, dtype=dt, device=device) for _ in range(3))
        kernels["memory"] = lambda: torch.add(x, y, out=z)
    rows = []
    for kind, kernel in kernels.items():
        t_kernel = slowest(kernel)
        for nbytes in sizes:
            buf = torch.ones(nbytes // 2 if cuda else nbytes // 4, dtype=dt, device=device)
            t_comm, t_compute, t_both, reps = _one_size(slowest, buf, kernel, t_kernel, ratio)
            rows.append({"bytes": nbytes, "group_size": dist.get_world_size(), "reps": reps,
                         "compute": kind, "t_comm": t_comm, "t_compute": t_compute,
                         "t_both": t_both, "slowdown": (t_both - t_compute) / t_comm,
                         "ratio": ratio,
                         "cuda_graph": cuda_graph,
                         "device": torch.cuda.get_device_name(device) if cuda else "cpu"})
    return rows


def _one_size(slowest: Any, buf: Any, kernel: Any, t_kernel: float, ratio: float = 2.5,
              ) -> tuple[float, float, float, int]:
    """``(t_comm, t_compute, t_both, reps)`` for one all-reduce buffer beside ``kernel``
    repeated to last about ``ratio`` x the all-reduce."""
    import torch.distributed as dist

    t_comm = slowest(lambda: dist.all_reduce(buf))
    reps = max(1, round(ratio * t_comm / max(t_kernel, 1e-9)))

    def compute() -> None:
        for _ in range(reps):
            kernel()

    def both() -> None:
        work = dist.all_reduce(buf, async_op=True)
        compute()
        work.wait()

    return t_comm, slowest(compute), slowest(both), reps


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m calibration.overlap", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpu", action="store_true", help="CPU processes over gloo")
    ap.add_argument("--world", type=int, default=0,
                    help="processes (default: every GPU; 2 with --cpu)")
    ap.add_argument("--trials", type=int, default=7)
    ap.add_argument("--profile", help="write the measured slowdown into this profile")
    ap.add_argument("--write", help="with --profile: write the result here instead")
    ap.add_argument("--json", help="write the measurements to this file")
    ap.add_argument("--memory", action="store_true",
                    help="also beside a bandwidth-bound kernel (an elementwise sum); "
                    "--profile still stores the products' median")
    ap.add_argument("--ratio", type=float, default=2.5,
                    help="the compute's length over the all-reduce's (default 2.5); below "
                    "1 the table's last column shows the collective slowed by the compute")
    ap.add_argument("--cuda-graph", action="store_true",
                    help="time each run replayed as a CUDA graph (GPUs only), as the "
                    "backend's --cuda-graph steps run")
    ap.add_argument("--sizes", type=float, nargs="+", metavar="MiB",
                    help="all-reduce sizes in MiB (default 32 64 128 256 on GPUs, 1 4 "
                    "with --cpu)")
    ap.add_argument("--fit-comm", nargs="+", metavar="JSON",
                    help="measure nothing: fit overlap_comm_slowdown on these --json files "
                    "(--memory --ratio 0.4 runs); --profile stores it there")
    ap.add_argument("--overlap-slowdown", type=float,
                    help="with --fit-comm: the profile's overlap_slowdown (default: "
                    "--profile's)")
    args = ap.parse_args(argv)
    if args.fit_comm:
        return _fit_comm(args)
    if args.profile:  # a bad profile fails before anything is measured
        from distir.analysis.hardware import load_hardware
        from distir.errors import DistIRError

        try:
            if not args.profile.endswith(".json"):
                raise DistIRError(f"--profile {args.profile}: give the path of the "
                                  "profile's .json file (it is rewritten in place)")
            load_hardware(args.profile)
        except DistIRError as e:
            print(e, file=sys.stderr)
            return 2
    if not args.ratio > 0:
        print(f"error: --ratio {args.ratio}: give the compute's length over the "
              "all-reduce's, a positive number (e.g. 0.4 or 2.5)", file=sys.stderr)
        return 2
    if args.cpu:
        if args.cuda_graph:
            print("error: --cuda-graph needs GPUs: gloo collectives cannot be captured",
                  file=sys.stderr)
            return 2
        backend, world, sizes = "gloo", args.world or 2, CPU_SIZES
    else:
        import torch

        if not torch.cuda.is_available():
            print("error: no CUDA device; run with --cpu for a gloo smoke test",
                  file=sys.stderr)
            return 2
        backend, world, sizes = "nccl", args.world or torch.cuda.device_count(), GPU_SIZES
    if world < 2:
        print(f"error: the overlap needs 2 or more processes, got {world}", file=sys.stderr)
        return 2
    if args.sizes:
        if min(args.sizes) <= 0:
            print(f"error: --sizes {args.sizes}: give positive sizes in MiB",
                  file=sys.stderr)
            return 2
        sizes = [int(x * (1 << 20)) // 4 * 4 for x in args.sizes]
    rows = measure_overlap(world, backend, sizes, trials=args.trials,
                           cuda_graph=args.cuda_graph, memory=args.memory,
                           ratio=args.ratio)
    how = ", replayed as CUDA graphs" if args.cuda_graph else ""
    print(f"overlap of all-reduce and compute, {world} x {rows[0]['device']}{how}")
    print(f"{'compute':>8} {'MiB':>6} {'comm ms':>9} {'compute ms':>11} {'both ms':>9} "
          f"{'slowdown':>9} {'both/longer':>12}")
    for r in rows:
        longer = max(r["t_comm"], r["t_compute"])
        print(f"{r['compute']:>8} {r['bytes'] / (1 << 20):>6.4g} {r['t_comm'] * 1e3:>9.3f} "
              f"{r['t_compute'] * 1e3:>11.3f} {r['t_both'] * 1e3:>9.3f} {r['slowdown']:>9.3f} "
              f"{r['t_both'] / longer:>12.3f}")
    if args.memory:
        print(f"beside the bandwidth-bound kernel (median): {slowdown(rows, 'memory'):.3f}")
    value = slowdown(rows)
    print(f"overlap_slowdown (median beside the products, clipped to [0, 1]): {value:.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    if args.profile:
        write_profile(args.profile, value, args.write)
        print(f"wrote overlap_slowdown={value:.4f} into {args.write or args.profile}")
    return 0


def _fit_comm(args: argparse.Namespace) -> int:
    """``--fit-comm``: ``overlap_comm_slowdown`` from measurements already taken."""
    from distir.analysis.hardware import load_hardware
    from distir.errors import DistIRError

    s = args.overlap_slowdown
    try:
        if s is None:
            if not args.profile:
                raise DistIRError("--fit-comm needs --overlap-slowdown or --profile (whose "
                                  "overlap_slowdown the fit takes)")
            s = load_hardware(args.profile).overlap_slowdown
        rows = [r for f in args.fit_comm
                for r in json.loads(Path(f).read_text(encoding="utf-8"))]
        value = comm_slowdown(rows, s)
    except (DistIRError, OSError, ValueError, KeyError) as e:
        print(f"error: --fit-comm: {e}", file=sys.stderr)
        return 2
    print(f"{'MiB':>6} {'comm ms':>9} {'compute ms':>11} {'both ms':>9} {'per s beside':>13}")
    for r in rows:
        if r.get("compute") == "memory" and r["t_compute"] < r["t_comm"]:
            beside = min(r["t_compute"], (1.0 - s) * r["t_comm"])
            print(f"{r['bytes'] / (1 << 20):>6.4g} {r['t_comm'] * 1e3:>9.3f} "
                  f"{r['t_compute'] * 1e3:>11.3f} {r['t_both'] * 1e3:>9.3f} "
                  f"{(r['t_both'] - r['t_comm']) / beside:>13.3f}")
    print(f"overlap_comm_slowdown (median, overlap_slowdown {s}): {value:.4f}")
    if args.profile:
        names = ", ".join(Path(f).as_posix() for f in args.fit_comm)
        names += " (" + ", ".join(sorted({f"{r.get('group_size', '?')} x {r.get('device', '?')}"
                                          for r in rows})) + ")"
        write_profile(args.profile, value, args.write, "overlap_comm_slowdown",
                      f"{round(value, 4)}: the all-reduce's extra time per second of "
                      "bandwidth-bound compute beside it, median over the rows of "
                      f"{names} (python -m calibration.overlap --memory --ratio 0.4; fitted "
                      f"by --fit-comm with overlap_slowdown {s}).")
        print(f"wrote overlap_comm_slowdown={value:.4f} into {args.write or args.profile}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
