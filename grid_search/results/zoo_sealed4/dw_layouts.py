"""Depthwise 3 x 3 convolutions (SegFormer's Mix-FFN sizes) and their gradients, timed on
one GPU with an NCHW input and with a channels-last one (a ``[B, HW, C]`` tensor transposed
and viewed as ``[B, C, H, W]``, as the exported model hands it over), by CUDA events over
repeated calls. Prints one line per shape: the two times and their ratio.

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


def main() -> None:
    dev = torch.device("cuda")
    print("| batch | channels | side | NCHW fwd+bwd (ms) | channels-last fwd+bwd (ms) | ratio |")
    print("|---|---|---|---|---|---|")
    for n, c, s in ((64, 128, 56), (64, 256, 28), (64, 640, 14), (64, 1024, 7),
                    (128, 128, 56), (64, 64, 56)):
        conv = torch.nn.Conv2d(c, c, 3, padding=1, groups=c, device=dev)
        times = []
        for layout in ("nchw", "nhwc"):
            if layout == "nchw":
                x = torch.randn(n, c, s, s, device=dev, requires_grad=True)
            else:
                t = torch.randn(n, s * s, c, device=dev)
                x = t.transpose(1, 2).reshape(n, c, s, s).detach().requires_grad_()
            dy = torch.randn(n, c, s, s, device=dev)

            def step(x=x, dy=dy, conv=conv) -> None:
                y = conv(x)
                torch.autograd.grad(y, (x, conv.weight), dy)

            times.append(_time(step))
        print(f"| {n} | {c} | {s} | {times[0]:.3f} | {times[1]:.3f} | "
              f"{times[0] / times[1]:.2f} |")


if __name__ == "__main__":
    main()
