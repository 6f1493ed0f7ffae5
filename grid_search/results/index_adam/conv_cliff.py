"""SEW-D's positional convolution (a 1-D convolution of 768 channels in 16 groups, kernel
128, stride 2, pads 64, over 199 frames) and its gradient, timed on a GPU at several
batch sizes with cuDNN's heuristics (PyTorch's default, as the backend runs it) and with
``torch.backends.cudnn.benchmark`` (each shape's algorithms tried first): the one-GPU
step's gradient took 9.9 ms at 8 clips against 0.37 predicted, and the step at 16 clips
ran at its prediction. Prints ms per call (median of 5 rounds of 10 calls, CUDA events).

    python conv_cliff.py
"""

from __future__ import annotations

import statistics

import torch


def ms(f) -> float:  # type: ignore[no-untyped-def]
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    rounds = []
    for _ in range(5):
        a, z = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(10):
            f()
        z.record()
        torch.cuda.synchronize()
        rounds.append(a.elapsed_time(z) / 10)
    return statistics.median(rounds)


def main() -> None:
    dev = torch.device("cuda")
    w = torch.randn(768, 48, 128, device=dev)
    cb = torch.ops.aten.convolution_backward
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, cuDNN "
          f"{torch.backends.cudnn.version()}")
    print("batch  benchmark  conv (ms)  dx (ms)  dw (ms)  dx+dw (ms)")
    for bench in (False, True):
        torch.backends.cudnn.benchmark = bench
        for b in (4, 6, 8, 12, 16, 24, 32):
            x = torch.randn(b, 768, 199, device=dev)
            y = torch.nn.functional.conv1d(x, w, None, 2, 64, 1, 16)
            dy = torch.randn_like(y)

            def grad(mask: list[bool], x: torch.Tensor = x, dy: torch.Tensor = dy) -> object:
                return cb(dy, x, w, None, [2], [64], [1], False, [0], 16, mask)

            row = [ms(lambda x=x: torch.nn.functional.conv1d(x, w, None, 2, 64, 1, 16)),
                   ms(lambda: grad([True, False, False])), ms(lambda: grad([False, True, False])),
                   ms(lambda: grad([True, True, False]))]
            print(f"{b:5d}  {str(bench):9s}  " + "  ".join(f"{v:8.3f}" for v in row))


if __name__ == "__main__":
    main()
