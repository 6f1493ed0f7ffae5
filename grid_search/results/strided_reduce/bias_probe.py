"""Bias adds as a transformer's linear layers run them (``y[N, L, C] + b[C]``), each
timed alone as a replayed CUDA graph of 20 calls (device time per call, median of 5
replays, as ``../adam_step/tile_probe.py`` times them), beside a same-shape add of the
same bytes and the ``elementwise_bcast`` microbenchmark's own shape (``[rows, 4096] +
[4096]``, ``calibration.bench_broadcast``) of about the same bytes, float32:

    python bias_probe.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "adam_step"))
from tile_probe import timed  # noqa: E402  (the same replayed timing)


def main() -> None:
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, float32")
    print("   N     L     C   MB moved   bias add  same-shape add  [rows, 4096] bias  (us)")
    for c in (768, 3072):
        for n in (4, 8, 16):
            for tokens in (199, 512):
                y = torch.randn(n, tokens, c, device="cuda")
                b = torch.randn(c, device="cuda")
                z = torch.randn(n, tokens, c, device="cuda")
                rows = max(n * tokens * c // 4096, 1)
                w = torch.randn(rows, 4096, device="cuda")
                wb = torch.randn(4096, device="cuda")
                bias = timed(lambda y=y, b=b: y + b)
                same = timed(lambda y=y, z=z: y + z)
                fam = timed(lambda w=w, wb=wb: w + wb)
                mb = 2 * y.numel() * 4 / 1e6
                print(f"{n:4d} {tokens:5d} {c:5d} {mb:10.1f} {bias:10.1f} {same:15.1f} "
                      f"{fam:18.1f}", flush=True)


if __name__ == "__main__":
    main()
