"""Concatenations as a relative-position shift runs them (wav2vec 2.0-Conformer's, HF's
export): a zero part expanded from a scalar beside a contiguous tensor, along axis 2 (a
row prepended) and axis 3 (columns appended), rank 4 as exported and the same memory
viewed with the axes before the concatenated one merged (rank 3 or 2), with the zero part
expanded or contiguous; each timed alone as a replayed CUDA graph of 20 calls (device
time per call, median of 5 replays, as ``../adam_step/tile_probe.py`` times them),
float32:

    python concat_probe.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "adam_step"))
from tile_probe import timed  # noqa: E402  (the same replayed timing)


def main() -> None:
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, float32")
    print("   B     T  axis  rank  zero part    us")
    zero = torch.zeros((), device="cuda")
    for b in (4, 8, 16):
        t = 199
        for axis in (2, 3):
            big = torch.randn((b, 12, t * 2 - 1, t) if axis == 2 else (b, 12, t, t),
                              device="cuda")
            pad = (b, 12, 1, t) if axis == 2 else (b, 12, t, t - 1)
            for rank in (4, 3 if axis == 2 else 2):
                lead = b * 12 if axis == 2 else b * 12 * t
                shape_big = big.shape if rank == 4 else (lead, *big.shape[axis:])
                shape_pad = pad if rank == 4 else (lead, *pad[axis:])
                dim = axis if rank == 4 else 1
                x = big.reshape(shape_big)
                for kind in ("expanded", "contiguous"):
                    z = zero.expand(shape_pad) if kind == "expanded" else \
                        torch.zeros(shape_pad, device="cuda")
                    parts = (z, x) if axis == 2 else (x, z)  # (as the shift orders them)
                    us = timed(lambda parts=parts, dim=dim: torch.cat(parts, dim=dim))
                    print(f"{b:4d} {t:5d} {axis:5d} {rank:5d}  {kind:10s} {us:6.1f}",
                          flush=True)


if __name__ == "__main__":
    main()
