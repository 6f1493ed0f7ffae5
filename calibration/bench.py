"""Single-device microbenchmarks through torch: matrix products and elementwise kernels.

Timing: a few warm-up calls, three timed single calls to choose the repetition count (so
that a trial lasts about ``target_s``), then ``trials`` trials of back-to-back calls, each timed
with CUDA events on a GPU (``time.perf_counter`` on a CPU); the result is the median over
trials of the time per call. Back-to-back calls include PyTorch's per-call overhead, which
is what a program running eagerly pays, so small kernels measure the launch overhead.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Row", "Timer", "matmul_shapes", "unaligned_matmul_shapes", "elementwise_sizes",
           "size_ladder", "bench_matmuls", "bench_elementwise", "TORCH_DTYPES"]

TORCH_DTYPES = {"Float32": "float32", "Float16": "float16", "BFloat16": "bfloat16"}
"""DistIR dtype names and the torch dtypes they are measured with."""


@dataclass
class Row:
    """One measurement: a configuration and its median time per call (s)."""

    family: str            # matmul | elementwise | allreduce | allgather | ... | send
    op: str                # the torch call measured
    dtype: str             # DistIR dtype name
    seconds: float
    m: int = 0
    n: int = 0
    k: int = 0
    bytes: int = 0         # memory traffic (compute) or message size (communication)
    flops: float = 0.0
    group_size: int = 1
    reps: int = 0
    device: str = ""
    split: str = "train"   # train | test (held out)
    extra: dict[str, Any] = field(default_factory=dict)

    FIELDS = ("family", "op", "dtype", "m", "n", "k", "bytes", "flops", "group_size",
              "seconds", "reps", "device", "split")

    def as_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.FIELDS}


class Timer:
    """Times a callable on one torch device (see the module docstring)."""

    def __init__(self, device: Any, target_s: float = 0.02, trials: int = 3,
                 max_reps: int = 200) -> None:
        import torch

        self.torch = torch
        self.device = device
        self.cuda = device.type == "cuda"
        self.target_s = target_s
        self.trials = trials
        self.max_reps = max_reps

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def _run(self, fn: Callable[[], object], reps: int) -> float:
        if self.cuda:
            start = self.torch.cuda.Event(enable_timing=True)
            end = self.torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(reps):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3 / reps
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        return (time.perf_counter() - t0) / reps

    def time(self, fn: Callable[[], object]) -> tuple[float, int]:
        """``(median seconds per call, repetitions per trial)``."""
        for _ in range(3):
            fn()
        self.sync()
        once = max(statistics.median(self._run(fn, 1) for _ in range(3)), 1e-7)
        reps = int(min(self.max_reps, max(2, self.target_s / once)))
        samples = [self._run(fn, reps) for _ in range(self.trials)]
        return statistics.median(samples), reps


def matmul_shapes(quick: bool, cuda: bool, n: int, seed: int = 0,
                  max_flops: float = 1.1e12, off_grid: bool = False,
                  ) -> list[tuple[int, int, int]]:
    """``n`` distinct ``(m, n, k)`` drawn log-uniformly from a grid of powers of two and
    their midpoints (1.5 x), plus the cubes, with at most ``max_flops`` FLOPs each. With
    ``off_grid``, each dimension is instead any multiple of 8 over the same range
    (``off_grid_dims``): the sizes real models make (a ViT's 197 tokens times the batch,
    an MLP of 8/3 the width rounded), where a kernel's tiles and waves fill otherwise."""
    if off_grid:
        lo, hi = (16, 256) if quick else ((64, 16384) if cuda else (32, 1024))
        rng = random.Random(seed)
        return sample_shapes(rng, (off_grid_dims(lo, hi, 8),) * 3, n, max_flops)
    if quick:
        dims = [16, 24, 32, 48, 64, 96, 128, 192, 256]
    elif cuda:
        dims = [64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144,
                8192, 12288, 16384]
    else:
        dims = [32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024]
    rng = random.Random(seed)
    shapes: dict[tuple[int, int, int], None] = {}
    for d in dims:
        if 2.0 * d ** 3 <= max_flops:
            shapes[(d, d, d)] = None
    return sample_shapes(rng, (dims, dims, dims), n, max_flops, shapes)


def off_grid_dims(lo: int, hi: int, step: int, count: int = 400) -> list[int]:
    """``count`` sizes (fewer where they repeat), multiples of ``step`` spread
    log-uniformly over ``[lo, hi]``: drawn from, they make shapes of every alignment the
    grid leaves out, without favouring small ones."""
    out = {max(lo, min(hi, round(lo * (hi / lo) ** (i / (count - 1)) / step) * step))
           for i in range(count)}
    return sorted(out)


def sample_shapes(rng: random.Random, axes: tuple[list[int], list[int], list[int]], n: int,
                  max_flops: float, shapes: dict[tuple[int, int, int], None] | None = None,
                  ) -> list[tuple[int, int, int]]:
    """Up to ``n`` distinct products ``(a, b, c)`` (``shapes`` first), each axis drawn from
    its list, of at most ``max_flops`` (``2abc``) FLOPs, shuffled."""
    shapes = {} if shapes is None else shapes
    tries = 0
    while len(shapes) < n and tries < 100 * n:
        tries += 1
        s = (rng.choice(axes[0]), rng.choice(axes[1]), rng.choice(axes[2]))
        if 2.0 * s[0] * s[1] * s[2] <= max_flops:
            shapes[s] = None
    out = list(shapes)
    rng.shuffle(out)
    return out


def unaligned_matmul_shapes(quick: bool, cuda: bool, n: int, seed: int = 1,
                            max_flops: float = 1.1e12) -> list[tuple[int, int, int]]:
    """``n`` distinct ``(m, n, k)`` whose ``n`` or ``k`` (the leading dimensions of a
    row-major product) is not a multiple of 8, as a vocabulary of 50257 makes the LM head:
    16-bit products leave the fast tensor-core kernels there. Drawn like ``matmul_shapes``,
    then one or both of ``n`` and ``k`` moved off alignment; on a GPU also LM-head shapes."""
    base = matmul_shapes(quick, cuda, 4 * n, seed, max_flops)
    rng = random.Random(seed)
    shapes: dict[tuple[int, int, int], None] = {}
    if cuda:
        for m in (1024, 2048, 4096, 8192):
            for k in (768, 1024, 2048):
                if 2.0 * m * 50257 * k <= max_flops:
                    shapes[(m, 50257, k)] = None
    for m, nn, k in base:
        if len(shapes) >= n:
            break
        which = rng.choice(("n", "k", "nk"))
        if "n" in which:
            nn += rng.choice((-3, -1, 1, 3))
        if "k" in which:
            k += rng.choice((-3, -1, 1, 3))
        if 2.0 * m * nn * k <= max_flops:
            shapes[(m, nn, k)] = None
    out = list(shapes)
    rng.shuffle(out)
    return out[:max(n, 1)]


def size_ladder(lo: int, hi: int) -> list[tuple[int, str]]:
    """``(size, split)`` for the powers of two from 2^lo to 2^hi (training) and the sizes
    halfway between them, 1.5 x 2^k (held out): aligned as real tensor sizes are."""
    out = []
    for k in range(lo, hi + 1):
        out.append((1 << k, "train"))
        if k < hi:
            out.append((3 << (k - 1), "test"))
    return out


def elementwise_sizes(quick: bool, cuda: bool) -> list[tuple[int, str]]:
    """Element counts from 2^10 up (see ``size_ladder``)."""
    return size_ladder(10, 18 if quick else (28 if cuda else 24))


def _split(i: int, test_every: int = 4) -> str:
    return "test" if i % test_every == test_every - 1 else "train"


def bench_matmuls(device: Any, dtypes: list[str], shapes: list[tuple[int, int, int]],
                  timer: Timer, log: Callable[[str], None],
                  family: str = "matmul") -> Iterator[Row]:
    """Time ``a @ b`` for every shape and dtype; one shape in four is held out.
    ``family`` names the rows (``matmul_unaligned`` for shapes off 8-element alignment)."""
    import torch

    for dt in dtypes:
        tdt = getattr(torch, TORCH_DTYPES[dt])
        size = torch.empty((), dtype=tdt).element_size()
        for i, (m, n, k) in enumerate(shapes):
            a = torch.randn(m, k, device=device, dtype=tdt)
            b = torch.randn(k, n, device=device, dtype=tdt)
            c = torch.empty(m, n, device=device, dtype=tdt)
            secs, reps = timer.time(lambda a=a, b=b, c=c: torch.matmul(a, b, out=c))
            del a, b, c
            yield Row(family, "matmul", dt, secs, m, n, k, (m * k + k * n + m * n) * size,
                      2.0 * m * n * k, 1, reps, str(device), _split(i))
            if i % 25 == 24:
                log(f"{family} {dt}: {i + 1}/{len(shapes)}")


def bench_elementwise(device: Any, dtypes: list[str], sizes: list[int], timer: Timer,
                      log: Callable[[str], None]) -> Iterator[Row]:
    """Time ``add`` (two inputs, one result) and ``clamp_min`` (a ReLU: one of each) over
    ``(element count, split)`` sizes."""
    import torch

    for dt in dtypes:
        tdt = getattr(torch, TORCH_DTYPES[dt])
        size = torch.empty((), dtype=tdt).element_size()
        for n, split in sizes:
            x = torch.randn(n, device=device, dtype=tdt)
            y = torch.randn(n, device=device, dtype=tdt)
            z = torch.empty(n, device=device, dtype=tdt)
            secs, reps = timer.time(lambda x=x, y=y, z=z: torch.add(x, y, out=z))
            yield Row("elementwise", "add", dt, secs, n, bytes=3 * n * size, flops=float(n),
                      reps=reps, device=str(device), split=split)
            secs, reps = timer.time(lambda x=x, z=z: torch.clamp_min(x, 0.0, out=z))
            yield Row("elementwise", "clamp_min", dt, secs, n, bytes=2 * n * size, flops=float(n),
                      reps=reps, device=str(device), split=split)
            del x, y, z
        log(f"elementwise {dt}: {len(sizes)} sizes")
