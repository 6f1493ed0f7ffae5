"""Time the backend's ``GatherElements`` and adding ``ScatterElements`` of an index
broadcast over batch and heads, side by side in one process on a GPU: the lowering before
2026-11-28 (negative indices wrapped over the whole expanded index: three passes over it)
and the lowering since (wrapped once per distinct element, then read as the broadcast
view), at HF DeBERTa-v3-base's disentangled attention (``[batch x 12 heads, 512, 512]``
float32 scores, an int64 index of ``[1, 512, 512]`` expanded over the first axis); the
scatter adds into a tensor it copies first (``Tensor.scatter_add``). Prints one line per
case: milliseconds per call (median of 5 rounds of 20 calls, CUDA events) and the ratio.

    python wrap_lowering.py [--batch 8]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the project's root

from distir.backend.ops_index import _wrap  # noqa: E402


def _wrap_before(i: torch.Tensor, n: int) -> torch.Tensor:
    i = i.long()
    return torch.where(i < 0, i + n, i)


def ms(f, *args) -> float:  # type: ignore[no-untyped-def]
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
    ap.add_argument("--batch", type=int, default=8)
    bh = ap.parse_args().batch * 12
    dev = torch.device("cuda")
    t, w = 512, 512
    x = torch.randn(bh, t, w, device=dev)
    u = torch.randn(bh, t, t, device=dev)
    idx = torch.randint(0, w, (1, t, t), device=dev).expand(bh, t, t)
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, scores "
          f"[{bh}, {t}, {w}] float32, index [1, {t}, {t}] expanded to [{bh}, {t}, {t}]")
    print("case                       before (ms)  since (ms)  ratio")
    for name, op in (("GatherElements", lambda wr: torch.gather(x, 2, wr(idx, w))),
                     ("ScatterElements add", lambda wr: x.scatter_add(2, wr(idx, w), u))):
        b, a = ms(op, _wrap_before), ms(op, _wrap)
        print(f"{name:26s} {b:11.3f} {a:11.3f} {b / a:6.2f}")
    same = torch.equal(torch.gather(x, 2, _wrap_before(idx, w)), torch.gather(x, 2, _wrap(idx, w)))
    print(f"same results: {same}")


if __name__ == "__main__":
    main()
