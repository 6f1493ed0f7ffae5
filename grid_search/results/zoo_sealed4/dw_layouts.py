"""Depthwise 3 x 3 convolutions (SegFormer's Mix-FFN sizes) and their two gradients, timed
on one GPU with NCHW ``x`` and ``dy`` and with channels-last ones (a ``[B, HW, C]`` tensor
transposed and viewed as ``[B, C, H, W]``, as the exported model hands them over), by
CUDA events over repeated calls. Prints one line per shape: the forward, ``dx`` and ``dw``
times in each format and their ratios (NCHW over channels-last).

    python grid_search/results/zoo_sealed4/dw_layouts.py
"""

from __future__ import annotations

import torch


def _time(fn, reps: int = 50) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / reps


def _three(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor) -> list[float]:
    """The forward, ``dx`` and ``dw`` times (ms) of a depthwise 3 x 3 of ``x``."""
    c = w.shape[0]
    cb = torch.ops.aten.convolution_backward
    geo = ([1, 1], [1, 1], [1, 1], False, [0, 0], c)
    return [_time(lambda: torch.nn.functional.conv2d(x, w, None, 1, 1, 1, c)),
            _time(lambda: cb(dy, x, w, None, *geo, [True, False, False])),
            _time(lambda: cb(dy, x, w, None, *geo, [False, True, False]))]


def main() -> None:
    dev = torch.device("cuda")
    print("| batch | channels | side | NCHW fwd / dgrad / wgrad (ms) | "
          "channels-last fwd / dgrad / wgrad (ms) | ratios |")
    print("|---|---|---|---|---|---|")
    for n, c, s in ((64, 128, 56), (64, 256, 28), (64, 640, 14), (64, 1024, 7),
                    (128, 128, 56), (64, 64, 56)):
        w = torch.randn(c, 1, 3, 3, device=dev)
        a = _three(torch.randn(n, c, s, s, device=dev), w,
                   torch.randn(n, c, s, s, device=dev))
        # [B, HW, C] transposed and viewed as [B, C, H, W], as the exported model does
        b = _three(torch.randn(n, s * s, c, device=dev).transpose(1, 2).reshape(n, c, s, s), w,
                   torch.randn(n, s * s, c, device=dev).transpose(1, 2).reshape(n, c, s, s))
        print(f"| {n} | {c} | {s} | {a[0]:.3f} / {a[1]:.3f} / {a[2]:.3f} | "
              f"{b[0]:.3f} / {b[1]:.3f} / {b[2]:.3f} | "
              + " / ".join(f"{p / q:.2f}" for p, q in zip(a, b, strict=True)) + " |")


if __name__ == "__main__":
    main()
