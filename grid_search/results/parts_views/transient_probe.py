"""What a kernel allocates while it runs, beyond its inputs and result: the caching
allocator's peak during one op less what it held before and the result's bytes, on one
GPU (each op run twice; the second run's figure). The ops whose one-GPU training steps
held more than the liveness model during them (``call_h``): a column sum over leading
axes (``torch.sum(x, dim=(0, 1), keepdim=True)``, the backend's ``ReduceSum`` of a bias
gradient), a convolution's gradients (``torch.ops.aten.convolution_backward``), and the
backend's ``AveragePoolGrad`` of a pool that leaves pads out of its count (PoolFormer's
mixer), by the project's own lowerings.

    python transient_probe.py > transient_probe.txt
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

MIB = 2**20


def transient(f, *args) -> tuple[float, float]:
    """(MiB allocated beyond the inputs and the result while ``f(*args)`` runs, ms)."""
    held: list = []  # (the result, alive while the allocator is read)
    for _ in range(2):
        held.clear()
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        held.append(f(*args))
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
        kept = torch.cuda.memory_allocated() - before
    held.clear()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        f(*args)
    end.record()
    torch.cuda.synchronize()
    return (peak - before - kept) / MIB, start.elapsed_time(end) / 5


def main() -> None:
    dev = torch.device("cuda")
    print(torch.cuda.get_device_name(), torch.__version__)
    print("## column sums: torch.sum(x, dim=(0, 1), keepdim=True)")
    for shape in [(64, 196, 2304), (64, 784, 1152), (16, 512, 3072), (16, 512, 768),
                  (8, 512, 768), (128, 3136, 64), (64, 3136, 96), (4, 128, 256),
                  (256, 49, 3072)]:
        x = torch.randn(shape, device=dev)
        t, ms = transient(lambda a: torch.sum(a, dim=(0, 1), keepdim=True), x)
        print(f"sum {shape}: input {x.numel() * 4 / MIB:8.1f} MiB, transient {t:8.2f} MiB, "
              f"{ms:.3f} ms")
        del x
    print("## convolution gradients (input and weight), cudnn.benchmark "
          f"{torch.backends.cudnn.benchmark}")
    for xs, ws, stride, pad in [((64, 3, 224, 224), (96, 3, 7, 7), 4, 3),
                                ((64, 320, 14, 14), (1280, 320, 1, 1), 1, 0),
                                ((64, 2048, 7, 7), (512, 2048, 1, 1), 1, 0),
                                ((64, 64, 56, 56), (64, 64, 3, 3), 1, 1),
                                ((128, 32, 56, 56), (32, 1, 3, 3), 1, 1)]:
        x = torch.randn(xs, device=dev)
        w = torch.randn(ws, device=dev)
        groups = xs[1] // ws[1]
        y = torch.nn.functional.conv2d(x, w, None, stride, pad, 1, groups)
        dy = torch.randn_like(y)

        def grad(x=x, w=w, dy=dy, stride=stride, pad=pad, groups=groups):
            return torch.ops.aten.convolution_backward(
                dy, x, w, None, [stride] * 2, [pad] * 2, [1, 1], False, [0, 0], groups,
                [True, True, False])[:2]

        t, ms = transient(grad)
        print(f"conv grad x {xs} w {ws} s{stride} p{pad} g{groups}: transient {t:8.2f} MiB, "
              f"{ms:.3f} ms")
        del x, w, y, dy
    print("## AveragePoolGrad, count_include_pad=0, 3 x 3, stride 1, pads 1 (the backend's)")
    from distir.backend.ops_train import _avg_pool_grad

    k = _avg_pool_grad(2, [3, 3], [1, 1], [1, 1], False, False)
    for shape in [(64, 64, 56, 56), (64, 128, 28, 28), (64, 320, 14, 14)]:
        x = torch.randn(shape, device=dev)
        dy = torch.randn(shape, device=dev)
        t, ms = transient(lambda a, b: k(a, b), x, dy)
        print(f"avg_pool grad {shape}: input {x.numel() * 4 / MIB:6.1f} MiB, transient "
              f"{t:8.2f} MiB, {ms:.3f} ms")
        del x, dy


if __name__ == "__main__":
    main()
