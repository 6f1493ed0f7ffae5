"""Float32 column sums (a bias's gradient) as a training step's backward hands them to
PyTorch, each timed alone as a replayed CUDA graph of 20 calls (device time per call,
median of 5 replays, as ``../adam_step/tile_probe.py`` times them):

- ``contig``: ``dy[N, L, C]``, contiguous, summed over ``N`` and ``L`` (a linear layer's);
- ``after add``: the same, just written by the ``Add`` before it (the pair's time minus
  the ``Add``'s alone: the input in the L2 cache, as in a step);
- ``transposed``: ``dy`` a transposed view of ``[N, C, L]`` (a key's gradient that comes
  back from ``q @ k^T`` as ``[N, heads, head width, L]``), summed over ``N`` and ``L``;
- ``per head``: ``[N, heads, L, head width]`` summed to ``[heads, head width]`` (a per-head
  bias's gradient, reduced axes between kept ones).

for N = 4, 8, 16 sequences of L = 128, 199, 512 tokens and C = 768 (12 heads of 64) and
3,072 (the first three kinds).

    python reduce_probe.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "adam_step"))
from tile_probe import timed  # noqa: E402  (the same replayed timing)


def main() -> None:
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, float32")
    print("   N     L     C   contig  after add  transposed  per head   (us)")
    for c in (768, 3072):
        for n in (4, 8, 16):
            for tokens in (128, 199, 512):
                a = torch.randn(n, tokens, c, device="cuda")
                b = torch.randn(n, tokens, c, device="cuda")
                t = torch.randn(n, c, tokens, device="cuda").transpose(1, 2)
                plain = timed(lambda a=a: a.sum((0, 1)))
                add = timed(lambda a=a, b=b: a + b)
                both = timed(lambda a=a, b=b: (a + b).sum((0, 1)))
                trans = timed(lambda t=t: t.sum((0, 1)))
                head = float("nan")
                if c == 768:
                    h = torch.randn(n, 12, tokens, 64, device="cuda")
                    head = timed(lambda h=h: h.sum((0, 2)))
                print(f"{n:4d} {tokens:5d} {c:5d} {plain:8.1f} {both - add:10.1f} "
                      f"{trans:11.1f} {head:9.1f}", flush=True)


if __name__ == "__main__":
    main()
