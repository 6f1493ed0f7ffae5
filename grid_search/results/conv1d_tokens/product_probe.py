"""Float32 products of the wav2vec 2.0-Conformer's layers alone (see README.md, call G):
``x[M, K] @ w[K, N]`` and its two gradients' products (``dy @ w^T``, ``x^T @ dy``), each
timed as a replayed CUDA graph of 20 calls (device time per call, median of 5 replays, as
``../adam_step/tile_probe.py`` times them), for M = 796 / 1,592 / 3,184 (4, 8, 16 clips of
199 frames) and the layers' (K, N): (768, 3072), (3072, 768), (768, 768), (768, 1536).

    python product_probe.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "adam_step"))
from tile_probe import timed  # noqa: E402  (the same replayed timing)


def main() -> None:
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, float32 "
          f"(allow_tf32={torch.backends.cuda.matmul.allow_tf32})")
    print("     M     K     N   x@w us  dy@w^T us  x^T@dy us")
    for k, n in ((768, 3072), (3072, 768), (768, 768), (768, 1536)):
        for m in (796, 1592, 3184):
            x = torch.randn(m, k, device="cuda")
            w = torch.randn(k, n, device="cuda")
            dy = torch.randn(m, n, device="cuda")
            f = timed(lambda x=x, w=w: x @ w)
            d = timed(lambda dy=dy, w=w: dy @ w.t())
            g = timed(lambda x=x, dy=dy: x.t() @ dy)
            print(f"{m:6d} {k:5d} {n:5d} {f:8.1f} {d:10.1f} {g:10.1f}", flush=True)


if __name__ == "__main__":
    main()
