"""Collective microbenchmarks: one process per GPU (NCCL) or per CPU worker (gloo).

``bench_collectives`` spawns ``world`` processes with ``torch.multiprocessing``; each joins
a process group and, for every group size (powers of two up to ``world``, the first ranks)
and every message size, times ``all_reduce``, ``all_gather_into_tensor``,
``reduce_scatter_tensor``, ``broadcast`` and, for 2 ranks, ``send``/``recv``. Each time is
the median over 5 trials of back-to-back calls (all ranks agree on the repetition count
first, from the median of three single calls), and the reported time is the slowest
rank's. Rank 0 writes the rows as JSON.

With ``cuda_graph`` (``calibrate --device-time``), each measurement is instead the replay
of a CUDA graph holding ``reps`` back-to-back calls, captured after three eager ones (the
time per call, as a step replayed with ``--cuda-graph`` runs its collectives: no host
issue between them); ``send`` is then what the backend runs for a ``Send``/``Recv`` pair, a
broadcast from rank 0 within the pair's group (``distir.backend.ops_comm``).

Message size (bytes) is the largest per-rank buffer, as in ``hardware.collective_factors``:
the tensor for allreduce, broadcast and send; the gathered tensor for allgather; the
unsplit input for reduce-scatter. Powers of two train the fits; the sizes halfway between,
1.5 x 2^k, are held out.

NVLink multicast (NVLS) stays off in the spawned processes (``NCCL_NVLS_ENABLE=0``): on
shared machines it can take the GPUs out of service.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import sys
import tempfile
import time
from typing import Any

__all__ = ["COLLECTIVE_OPS", "bench_collectives", "message_sizes", "SAFE_ENV"]

COLLECTIVE_OPS = ("allreduce", "allgather", "reduce_scatter", "broadcast", "send")

SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
            "NVSHMEM_DISABLE_NVLS": "1"}
"""Environment kept in every spawned process (NVLink multicast off)."""


def message_sizes(quick: bool, cuda: bool) -> list[tuple[int, str]]:
    """``(bytes, split)``: powers of two from 4 KiB (training) and 1.5 x each (held out),
    up to 64 KiB (quick), 16 MiB (CPU) or 1 GiB (GPU). Every size divides into 64 ranks
    of whole, 512-byte aligned float32 shards: real tensors are aligned, and NCCL is
    slower on unaligned buffers."""
    from calibration.bench import size_ladder

    return size_ladder(12, 16 if quick else (30 if cuda else 24))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bench_collectives(world: int, backend: str, sizes: list[tuple[int, str]], *,
                      target_s: float = 0.01, trials: int = 5, timeout_s: float = 600.0,
                      cuda_graph: bool = False) -> list[dict[str, Any]]:
    """Rows (dicts of ``bench.Row`` fields) of every collective over ``world`` processes
    (replayed as CUDA graphs with ``cuda_graph``, NCCL only)."""
    import torch.multiprocessing as mp

    if cuda_graph and backend != "nccl":
        raise ValueError("collectives replayed as CUDA graphs need NCCL")
    os.environ.update(SAFE_ENV)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rows.json")
        args = (world, backend, sizes, target_s, trials, _free_port(), out, timeout_s,
                cuda_graph)
        mp.spawn(_worker, args=args, nprocs=world, join=True)
        with open(out, encoding="utf-8") as f:
            rows: list[dict[str, Any]] = json.load(f)
    return rows


def _worker(rank: int, world: int, backend: str, sizes: list[tuple[int, str]], target_s: float,
            trials: int, port: int, out: str, timeout_s: float, cuda_graph: bool = False,
            ) -> None:
    import datetime

    import torch
    import torch.distributed as dist

    os.environ.update(SAFE_ENV)
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=timeout_s))
    try:
        rows = _measure_all(rank, world, device, sizes, target_s, trials, cuda_graph)
        if rank == 0:
            with open(out, "w", encoding="utf-8") as f:
                json.dump(rows, f)
    finally:
        dist.destroy_process_group()


def _measure_all(rank: int, world: int, device: Any, sizes: list[tuple[int, str]],
                 target_s: float, trials: int, cuda_graph: bool = False,
                 ) -> list[dict[str, Any]]:
    import torch
    import torch.distributed as dist

    cuda = device.type == "cuda"
    group_sizes = [g for g in (2, 4, 8, 16, 32, 64) if g <= world]
    groups = {g: dist.new_group(list(range(g))) for g in group_sizes}
    name = torch.cuda.get_device_name(device) if cuda else "cpu"
    rows: list[dict[str, Any]] = []

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    def timed(fn: Any, reps: int) -> float:
        sync()
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        sync()
        return (time.perf_counter() - t0) / reps

    def replay_of(fn: Any, reps: int) -> Any:
        """``reps`` calls of ``fn`` captured as one CUDA graph (thread-local, as the
        backend captures: NCCL's watchdog may query earlier events); returns a function
        running one of them, on average, by replaying the graph (kept alive by it)."""
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream(device).wait_stream(side)
        sync()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, capture_error_mode="thread_local"):
            for _ in range(reps):
                fn()
        return g.replay

    def agree_max(x: float, pg: Any) -> float:
        t = torch.tensor([x], dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=pg)
        return float(t.item())

    for g in group_sizes:
        pg = groups[g]
        member = rank < g
        for op in COLLECTIVE_OPS:
            if op == "send" and g != 2:
                continue
            for i, (nbytes, split) in enumerate(sizes):
                secs = 0.0
                reps = 0
                numel = max(g, (nbytes // 4 // g) * g)
                if member:
                    fn = _make_op(op, rank, g, numel, device, pg, cuda_graph)
                    for _ in range(3):
                        fn()
                    single = statistics.median(timed(fn, 1) for _ in range(3))
                    once = agree_max(max(single, 1e-7), pg)
                    reps = int(min(200, max(2, target_s / once)))
                    samples = []
                    if cuda_graph:  # one replay of reps calls per trial
                        replay = replay_of(fn, reps)
                        replay()
                        for _ in range(trials):
                            dist.barrier(group=pg)
                            samples.append(timed(replay, 1) / reps)
                        del replay
                    else:
                        for _ in range(trials):
                            dist.barrier(group=pg)
                            samples.append(timed(fn, reps))
                    secs = statistics.median(samples)
                secs = agree_max(secs, None)  # the slowest rank's time
                if rank == 0:
                    torch_name = "broadcast" if cuda_graph and op == "send" else \
                        _TORCH_NAME[op]
                    rows.append({"family": op, "op": torch_name, "dtype": "Float32",
                                 "m": numel, "n": 0, "k": 0, "bytes": numel * 4, "flops": 0.0,
                                 "group_size": g, "seconds": secs, "reps": reps,
                                 "device": name, "split": split})
                    if i == len(sizes) - 1:
                        print(f"[calibrate] {op} over {g} ranks: {len(sizes)} sizes",
                              file=sys.stderr, flush=True)
    return rows


_TORCH_NAME = {"allreduce": "all_reduce", "allgather": "all_gather_into_tensor",
               "reduce_scatter": "reduce_scatter_tensor", "broadcast": "broadcast",
               "send": "send/recv"}


def _make_op(op: str, rank: int, g: int, numel: int, device: Any, pg: Any,
             as_backend: bool = False) -> Any:
    """One call of collective ``op`` on this rank; ``as_backend``: ``send`` as the backend
    sends (a broadcast from rank 0 within the pair's group)."""
    import torch
    import torch.distributed as dist

    if op == "allreduce":
        x = torch.ones(numel, device=device)
        return lambda: dist.all_reduce(x, group=pg)
    if op == "allgather":
        inp = torch.ones(numel // g, device=device)
        out = torch.empty(numel, device=device)
        # torch >= 2.13 renames all_gather_into_tensor (same signature).
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        return lambda: gather(out, inp, group=pg)
    if op == "reduce_scatter":
        inp = torch.ones(numel, device=device)
        out = torch.empty(numel // g, device=device)
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        return lambda: scatter(out, inp, group=pg)
    if op == "broadcast" or (op == "send" and as_backend):
        x = torch.ones(numel, device=device)
        return lambda: dist.broadcast(x, src=0, group=pg)
    if op == "send":
        x = torch.ones(numel, device=device)
        if rank == 0:
            return lambda: dist.send(x, dst=1, group=pg)
        return lambda: dist.recv(x, src=0, group=pg)
    raise ValueError(op)
