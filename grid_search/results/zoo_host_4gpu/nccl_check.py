"""All-reduce bus bandwidth over the first 2 and all 4 GPUs (NCCL), and the peer access the
driver reports: a check of a lease's interconnect. ``torchrun --nproc_per_node 4 nccl_check.py``"""

import os
import time

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group("nccl")
    r, w = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(r)
    if r == 0:
        print("peer access 0->k:", [torch.cuda.can_device_access_peer(0, k) for k in range(1, w)])
    for n in (2, w):
        g = dist.new_group(list(range(n)))
        for mb in (1, 16, 256):
            x = torch.ones(mb << 18, device="cuda")  # float32: mb MiB
            if r < n:
                for _ in range(5):
                    dist.all_reduce(x, group=g)
                torch.cuda.synchronize()
                t = time.perf_counter()
                for _ in range(20):
                    dist.all_reduce(x, group=g)
                torch.cuda.synchronize()
                dt = (time.perf_counter() - t) / 20
                if r == 0:
                    bus = 2 * (n - 1) / n * x.numel() * 4 / dt / 1e9
                    print(f"all_reduce {n} GPUs {mb:4d} MiB: {dt * 1e3:8.3f} ms, "
                          f"bus {bus:6.1f} GB/s")
            dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    main()
