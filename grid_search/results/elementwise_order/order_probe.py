"""Elementwise ops whose operands are in different memory orders, as PyTorch runs them.

TensorIterator orders an elementwise kernel's axes by its first operand's strides (its
result takes that order); an operand whose strides disagree (a transposed view) is then
read across its rows. Each timed alone as a replayed CUDA graph of 20 calls (device time
per call, median of 5 replays, as ``../adam_step/tile_probe.py`` times them), in us:

- ``add``: ``a + b``, both contiguous ``[B, M, N]``;
- ``mis``: ``a + t``, ``t`` the transposed view of a contiguous ``[B, N, M]``;
- ``mis_rev``: ``t + a`` (the result takes ``t``'s order, ``a`` is read across);
- ``same``: ``t * 0.5`` (one operand: the result takes its order, nothing read across);
- ``both``: ``t + u``, two transposed views of the same order;
- ``copy``: ``t.contiguous()`` (the transposing copy, as ``Transpose`` is priced);
- ``heads``: rank 4, ``[B, H, T, D] + p`` with ``p`` a ``permute(0, 2, 1, 3)`` view of a
  contiguous ``[B, T, H, D]``.

    python order_probe.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "adam_step"))
from tile_probe import timed  # noqa: E402  (the same replayed timing)

PAIRS = ((512, 512), (512, 64), (64, 512), (128, 128), (1024, 1024), (768, 3072),
         (3072, 768), (197, 197), (199, 64), (64, 199), (256, 1024))


def main() -> None:
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("dtype       B     M     N      MB     add     mis mis_rev    same    both    copy")
    for dt in (torch.float32, torch.bfloat16):
        for b in (1, 4, 16, 96):
            if dt == torch.bfloat16 and b not in (4, 96):
                continue
            for m, n in PAIRS:
                numel = b * m * n
                nbytes = numel * (4 if dt == torch.float32 else 2)
                if nbytes < (1 << 18) or nbytes > (1 << 29):
                    continue
                a = torch.randn(b, m, n, device="cuda", dtype=dt)
                a2 = torch.randn(b, m, n, device="cuda", dtype=dt)
                t = torch.randn(b, n, m, device="cuda", dtype=dt).transpose(1, 2)
                u = torch.randn(b, n, m, device="cuda", dtype=dt).transpose(1, 2)
                row = [timed(lambda x=a, y=a2: x + y), timed(lambda x=a, y=t: x + y),
                       timed(lambda x=a, y=t: y + x), timed(lambda y=t: y * 0.5),
                       timed(lambda y=t, z=u: y + z), timed(lambda y=t: y.contiguous())]
                print(f"{str(dt)[6:]:9s} {b:4d} {m:5d} {n:5d} {nbytes / 1e6:7.1f} "
                      + " ".join(f"{x:7.1f}" for x in row), flush=True)
                del a, a2, t, u
    print("heads (float32):    B     H     T     D      MB     add   heads    copy")
    for b in (4, 16):
        for tokens in (128, 512):
            for h, d in ((12, 64), (16, 64), (32, 128)):
                a = torch.randn(b, h, tokens, d, device="cuda")
                a2 = torch.randn(b, h, tokens, d, device="cuda")
                p = torch.randn(b, tokens, h, d, device="cuda").permute(0, 2, 1, 3)
                row = [timed(lambda x=a, y=a2: x + y), timed(lambda x=a, y=p: x + y),
                       timed(lambda y=p: y.contiguous())]
                print(f"{'':18s} {b:4d} {h:5d} {tokens:5d} {d:5d} {a.numel() * 4 / 1e6:7.1f} "
                      + " ".join(f"{x:7.1f}" for x in row), flush=True)


if __name__ == "__main__":
    main()
