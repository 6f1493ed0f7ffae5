"""ConvBERT's span-based convolution's products (16 x 512 tokens, 6 heads of 64, kernel
9: ``[49152, 64, 9] @ [49152, 9, 1]``) and both of their gradients' products as
``MatMulGrad``'s general lowering runs them (``torch.matmul(dy, b.mT)``,
``torch.matmul(a.mT, dy)``), each timed alone as a replayed CUDA graph of 20 calls
(device time per call, median of 5 replays, as ``../adam_step/tile_probe.py`` times
them), float32, at 8, 16 and 32 sequences:

    python unfold_probe.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "adam_step"))
from tile_probe import timed  # noqa: E402  (the same replayed timing)


def main() -> None:
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, float32")
    print(" batch   m   k   n   a @ b us  dy @ b^T us  a^T @ dy us")
    for seqs in (8, 16, 32):
        b = seqs * 512 * 6
        a = torch.randn(b, 64, 9, device="cuda")
        w = torch.randn(b, 9, 1, device="cuda")
        dy = torch.randn(b, 64, 1, device="cuda")
        f = timed(lambda a=a, w=w: torch.matmul(a, w))
        d = timed(lambda dy=dy, w=w: torch.matmul(dy, w.mT))
        g = timed(lambda a=a, dy=dy: torch.matmul(a.mT, dy))
        print(f"{b:6d}  64   9   1 {f:10.1f} {d:12.1f} {g:12.1f}", flush=True)


if __name__ == "__main__":
    main()
