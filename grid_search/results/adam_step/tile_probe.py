"""Float32 products of DINOv2's layers at rows just above and at multiples of 128 (see
README.md): ``x[M, K] @ w[K, N]`` and its two gradients' products, timed as a replayed
CUDA graph of 20 calls (device time per call, median of 5 replays), for M in 1024 / 1028,
2048 / 2056, 4096 / 4112 (4, 8, 16 images of 257 tokens against 256) and DINOv2's
(K, N): (768, 768), (768, 3072), (3072, 768).

    python tile_probe.py
"""

from __future__ import annotations

import statistics

import torch


def timed(fn, calls: int = 20) -> float:  # noqa: ANN001 - a probe
    """Device time per call of ``fn``: ``calls`` calls captured as a CUDA graph, replayed
    (median of 5 replays), in us."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    g.replay()
    torch.cuda.synchronize()
    out = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) * 1e3 / calls)
    return statistics.median(out)


def main() -> None:
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, float32 "
          f"(allow_tf32={torch.backends.cuda.matmul.allow_tf32})")
    print("     M     K     N   x@w us  dy@w^T us  x^T@dy us")
    for k, n in ((768, 768), (768, 3072), (3072, 768)):
        for m in (1024, 1028, 2048, 2056, 4096, 4112):
            x = torch.randn(m, k, device="cuda")
            w = torch.randn(k, n, device="cuda")
            dy = torch.randn(m, n, device="cuda")
            f = timed(lambda x=x, w=w: x @ w)
            d = timed(lambda dy=dy, w=w: dy @ w.t())
            g = timed(lambda x=x, dy=dy: x.t() @ dy)
            print(f"{m:6d} {k:5d} {n:5d} {f:8.1f} {d:10.1f} {g:10.1f}", flush=True)


if __name__ == "__main__":
    main()
