"""What a GPU's memory holds besides the tensors of a step: the profile's ``reserved_bytes``.

A run cannot give its tensors the card's whole capacity: the CUDA context, the math
libraries' handles and every NCCL communicator take device memory outside PyTorch's
allocator. This probe measures them on each of ``--gpus`` ranks, one stage at a time
(``torch.cuda.mem_get_info`` before and after, less what the allocator itself reserved):

1. the CUDA context (the first call that touches the device);
2. cuBLAS (a half-precision matrix product);
3. NCCL: the world communicator (an all-reduce over every rank), then each further
   communicator over the same ranks (``--groups`` more: a D x T program's ranks sit in
   one data-parallel and one tensor-parallel group, each its own communicator), then
   point-to-point sends between two ranks (pipelines).

and prints, per rank, each stage's bytes and the total that tensors cannot use, as JSON::

    python -m calibration.memory_overhead --gpus 2 [--groups 2] [-o overhead.json]

The largest total over ranks, rounded up to a MiB, is what ``reserved_bytes`` of the
machine's profile should hold (docs/simulation.md, "Memory").
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any


def _used(torch: Any, dev: int) -> int:
    """Device memory in use outside the caching allocator (bytes)."""
    free, total = torch.cuda.mem_get_info(dev)
    return total - free - torch.cuda.memory_reserved(dev)


def _rank(rank: int, world: int, groups: int, port: int, q: Any) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dev = rank
    torch.cuda.set_device(dev)
    stages: dict[str, int] = {}
    _, total = torch.cuda.mem_get_info(dev)  # makes the context
    before = 0
    now = _used(torch, dev)
    stages["cuda_context"] = now - before
    before = now
    a = torch.randn(256, 256, device=dev, dtype=torch.float16)
    (a @ a).sum().item()
    torch.cuda.synchronize(dev)
    now = _used(torch, dev)
    stages["cublas"] = now - before
    before = now
    dist.init_process_group("nccl", rank=rank, world_size=world,
                            device_id=torch.device("cuda", dev))
    x = torch.ones(1 << 20, device=dev)
    dist.all_reduce(x)
    torch.cuda.synchronize(dev)
    now = _used(torch, dev)
    stages["nccl_world"] = now - before
    before = now
    for g in range(groups):
        pg = dist.new_group(list(range(world)))
        dist.all_reduce(x, group=pg)
        torch.cuda.synchronize(dev)
        now = _used(torch, dev)
        stages[f"nccl_group_{g + 1}"] = now - before
        before = now
    if world >= 2:
        if rank == 0:
            dist.send(x, 1)
        elif rank == 1:
            dist.recv(x, 0)
        torch.cuda.synchronize(dev)
        dist.barrier()
        now = _used(torch, dev)
        stages["nccl_p2p"] = now - before
        before = now
    q.put({"rank": rank, "device": torch.cuda.get_device_name(dev), "total_bytes": total,
           "stages": stages, "outside_allocator_bytes": before})
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--groups", type=int, default=2,
                    help="communicators over the same ranks beyond the world's")
    ap.add_argument("--port", type=int, default=29533)
    ap.add_argument("-o", "--out", default=None)
    args = ap.parse_args(argv)
    import torch
    import torch.multiprocessing as mp

    if not torch.cuda.is_available() or torch.cuda.device_count() < args.gpus:
        print(f"memory_overhead: needs {args.gpus} CUDA devices; nothing measured")
        return 0
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, args.gpus, args.groups, args.port, q))
             for r in range(args.gpus)]
    for p in procs:
        p.start()
    rows = sorted((q.get(timeout=300) for _ in procs), key=lambda r: r["rank"])
    for p in procs:
        p.join(60)
    mib = 2**20
    for r in rows:
        parts = ", ".join(f"{k} {v / mib:.0f} MiB" for k, v in r["stages"].items())
        print(f"rank {r['rank']} ({r['device']}, {r['total_bytes'] / 2**30:.2f} GiB): {parts}; "
              f"outside the allocator {r['outside_allocator_bytes'] / mib:.0f} MiB")
    worst = max(r["outside_allocator_bytes"] for r in rows)
    out = {"reserved_bytes": -(-worst // mib) * mib, "ranks": rows}
    print(f"reserved_bytes {out['reserved_bytes']} ({out['reserved_bytes'] / mib:.0f} MiB)")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
