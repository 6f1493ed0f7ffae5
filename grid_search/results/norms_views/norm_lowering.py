"""Time two lowerings of an instance norm on a GPU, side by side in one process: the
backend's before 2026-11-28 (``torch.var_mean``, then four elementwise kernels) and
PyTorch's fused group norm (``F.group_norm`` with one channel per group), at PoolFormer-S12's
norms (one group: exported as an ``InstanceNormalization`` of ``[N, 1, C * H * W]``) and at
instance norms of ``[N, C, H, W]``. Prints one line per shape: milliseconds per call
(median of 5 rounds of 20 calls, CUDA events) and the ratio.

    python norm_lowering.py [--batch 128]
"""

from __future__ import annotations

import argparse
import statistics

import torch
import torch.nn.functional as F


def before(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float) -> torch.Tensor:
    dims = tuple(range(2, x.dim()))
    view = (1, x.shape[1]) + (1,) * (x.dim() - 2)
    var, mean = torch.var_mean(x, dim=dims, keepdim=True, correction=0)
    return (x - mean) * torch.rsqrt(var + eps) * w.view(view) + b.view(view)


def after(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float) -> torch.Tensor:
    return F.group_norm(x, x.shape[1], w, b, eps)


def ms(f, *args) -> float:
    for _ in range(3):
        f(*args)
    torch.cuda.synchronize()
    rounds = []
    for _ in range(5):
        a, z = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(20):
            f(*args)
        z.record()
        torch.cuda.synchronize()
        rounds.append(a.elapsed_time(z) / 20)
    return statistics.median(rounds)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=128)
    n = ap.parse_args().batch
    shapes = [(n, 1, 64 * 56 * 56), (n, 1, 128 * 28 * 28), (n, 1, 320 * 14 * 14),
              (n, 1, 512 * 7 * 7), (n, 64, 56, 56), (n, 256, 14, 14)]
    print(f"# {torch.cuda.get_device_name()}, float32, ms per call")
    for shape in shapes:
        x = torch.randn(shape, device="cuda")
        w = torch.randn(shape[1], device="cuda")
        b = torch.randn(shape[1], device="cuda")
        err = (before(x, w, b, 1e-5) - after(x, w, b, 1e-5)).abs().max().item()
        t0, t1 = ms(before, x, w, b, 1e-5), ms(after, x, w, b, 1e-5)
        print(f"{str(list(shape)):24s} before {t0:8.3f}  group_norm {t1:8.3f}  "
              f"ratio {t0 / t1:5.2f}  max diff {err:.1e}")


if __name__ == "__main__":
    main()
