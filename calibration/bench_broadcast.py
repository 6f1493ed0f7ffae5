"""Broadcasting elementwise kernels: the ``elementwise_bcast`` family of a profile.

PyTorch runs an elementwise kernel on contiguous operands of the result's shape with
vector loads; when an operand is broadcast (a bias ``(d,)`` against ``(N, d)``, an attention
mask ``(S, S)`` or ``(B, 1, 1, S)`` against ``(B, H, S, S)``, a per-row statistic
``(N, 1)``), it takes a strided path that is bound by elements per second rather than bytes:
on one H100, a float16 bias add moves about 1.6 TB/s where a same-shape add moves 3.0 TB/s
(float32: 2.5 against 3.0). The ``elementwise`` fit (same-shape ``add`` and ``clamp_min``)
therefore under-charges broadcasting ops, which transformers are full of. This module times
four broadcasting patterns per dtype over a ladder of result sizes; the fit is per dtype,
by bytes read and written (``tensor_bytes`` of the inputs and results, as the cost rule
counts them). ``distir.analysis.cost.compute`` charges an elementwise op with an input of
rank >= 1 smaller than its result with this fit when the profile has it (0-d operands are
scalars: the backend passes constants as Python numbers).

    python -m calibration.bench_broadcast -o broadcast.csv [--quick]

writes the rows in the measurements-CSV format, to append to a profile's measurements and
refit with ``python -m calibration --fit-only``; ``distir calibrate`` measures them too.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from typing import Any

from calibration.bench import TORCH_DTYPES, Row, Timer, size_ladder

__all__ = ["PATTERNS", "bench_broadcast", "broadcast_sizes", "main"]

PATTERNS = ("bias", "rowmask", "where_mask", "column")
"""``bias``: ``(N, d) + (d,)``; ``rowmask``: ``(B, H, S, S) + (B, 1, 1, S)``;
``where_mask``: ``where(mask (S, S), scalar, x (B, H, S, S))``; ``column``: ``(N, d) *
(N, 1)``."""

MAX_BYTES = 1 << 30


def broadcast_sizes(quick: bool, cuda: bool) -> list[tuple[int, str]]:
    """Result element counts from 2^12 (2^10 quick) up, 1.5 x 2^k held out."""
    return size_ladder(10, 16) if quick else size_ladder(12, 27 if cuda else 20)


def _shapes(pattern: str, n: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The result shape with ``n`` elements and the broadcast operand's shape."""
    if pattern in ("bias", "column"):
        d = min(1 << 12, max(n // 64, 16)) if n >= 1024 else max(n // 16, 1)
        d = 3 * d // 2 if n % d else d  # 1.5 x 2^k sizes keep a power-of-two row count
        rows = max(n // d, 1)
        return (rows, d), ((d,) if pattern == "bias" else (rows, 1))
    s = 64
    while s * s * 16 < n and s < 2048:
        s *= 2
    bh = max(n // (s * s), 1)
    b = 2 if bh % 2 == 0 else 1
    return (b, bh // b, s, s), ((b, 1, 1, s) if pattern == "rowmask" else (s, s))


def _call(pattern: str, x: Any, y: Any) -> Callable[[], Any]:
    """The kernel of ``pattern`` on ``x`` and its broadcast operand ``y``."""
    import torch

    if pattern == "where_mask":
        return lambda: torch.where(y, -1e4, x)
    op = torch.add if pattern in ("bias", "rowmask") else torch.mul
    return lambda: op(x, y)


def bench_broadcast(device: Any, dtypes: list[str], sizes: list[tuple[int, str]],
                    timer: Timer, log: Callable[[str], None]) -> Iterator[Row]:
    """Time every pattern of ``PATTERNS`` for each dtype and ``(element count, split)``."""
    import torch

    for dt in dtypes:
        tdt = getattr(torch, TORCH_DTYPES[dt])
        size = torch.empty((), dtype=tdt).element_size()
        count = 0
        for n, split in sizes:
            if 2 * n * size > MAX_BYTES:
                continue
            for pattern in PATTERNS:
                shape, small = _shapes(pattern, n)
                x = torch.randn(shape, device=device, dtype=tdt)
                numel = x.numel()
                if pattern == "where_mask":
                    y = torch.rand(small, device=device) > 0.5
                    nbytes = 2 * numel * size + y.numel()
                else:
                    y = torch.randn(small, device=device, dtype=tdt)
                    nbytes = (2 * numel + y.numel()) * size
                secs, reps = timer.time(_call(pattern, x, y))
                yield Row("elementwise_bcast", pattern, dt, secs, shape[0], numel // shape[0],
                          bytes=nbytes, flops=float(numel), reps=reps, device=str(device),
                          split=split)
                count += 1
                del x, y
        log(f"elementwise_bcast {dt}: {count} measurements")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m calibration.bench_broadcast",
                                 description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--output", required=True, help="the measurements CSV to write")
    ap.add_argument("--quick", action="store_true", help="a small ladder (seconds on a CPU)")
    ap.add_argument("--cpu", action="store_true", help="measure the CPU even with CUDA")
    args = ap.parse_args(argv)
    import time
    from pathlib import Path

    import torch

    from calibration.calibrate import _machine, write_measurements

    cuda = torch.cuda.is_available() and not args.cpu
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    timer = Timer(device, target_s=0.02 if cuda else 0.002, trials=3)
    dtypes = ["Float32", "Float16", "BFloat16"] if cuda else ["Float32"]
    t0 = time.perf_counter()
    rows = [r.as_dict() for r in bench_broadcast(
        device, dtypes, broadcast_sizes(args.quick, cuda), timer,
        lambda s: print(s, file=sys.stderr, flush=True))]
    machine = _machine(cuda)
    wall = time.perf_counter() - t0
    machine.update(command="python -m calibration.bench_broadcast", wall_s=wall,
                   gpu_seconds=wall if cuda else 0.0)
    write_measurements(Path(args.output), rows, machine)
    print(f"wrote {len(rows)} measurements to {args.output} in {wall:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
