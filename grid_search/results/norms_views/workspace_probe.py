"""What the CUDA caching allocator holds beyond a step's tensors for the math libraries'
workspaces: the bytes allocated, and not freed, by the first product (cuBLAS), the first
product with a bias (cuBLASLt's epilogue), the first convolution (cuDNN), each on the
default stream, and then by a capture of the same calls as a CUDA graph (the backend's
``--cuda-graph`` steps: an eager step, then a capture on a stream of its own). Prints one
line per call: MiB allocated after it, less its results, and the peak during it.

    python workspace_probe.py
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

MIB = 1 << 20


def held(label: str, fn, keep: list) -> None:
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn()
    torch.cuda.synchronize()
    outs = out if isinstance(out, tuple) else (out,)
    mine = sum(o.numel() * o.element_size() for o in outs)
    keep.append(out)
    after = torch.cuda.memory_allocated() - before - mine
    peak = torch.cuda.max_memory_allocated() - before - mine
    print(f"{label:44s} held {after / MIB:7.2f} MiB  peak {peak / MIB:7.2f} MiB")


def main() -> None:
    torch.cuda.init()
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}")
    a = torch.randn(1024, 1024, device="cuda")
    b = torch.randn(1024, 1024, device="cuda")
    bias = torch.randn(1024, device="cuda")
    x = torch.randn(32, 64, 56, 56, device="cuda")
    w = torch.randn(64, 64, 3, 3, device="cuda")
    keep: list = []
    held("eager matmul (cuBLAS)", lambda: a @ b, keep)
    held("eager matmul again", lambda: a @ b, keep)
    held("eager linear with bias (cuBLASLt)", lambda: F.linear(a, b, bias), keep)
    held("eager bmm", lambda: torch.bmm(a.view(4, 256, 1024), b.view(4, 1024, 256)), keep)
    held("eager conv (cuDNN)", lambda: F.conv2d(x, w, padding=1), keep)
    held("eager conv again", lambda: F.conv2d(x, w, padding=1), keep)
    torch.cuda.empty_cache()
    graph = torch.cuda.CUDAGraph()

    def capture():
        with torch.inference_mode(), torch.cuda.graph(graph, capture_error_mode="thread_local"):
            y = a @ b
            z = F.linear(a, b, bias)
            c = F.conv2d(x, w, padding=1)
        return y, z, c

    held("captured matmul, linear, conv (graph pool)", capture, keep)
    held("replay", lambda: (graph.replay(), a[:0])[1], keep)


if __name__ == "__main__":
    main()
