"""Microbenchmarks of the kernels a transformer runs besides plain matrix products, timed as
the PyTorch backend (``distir/backend/ops_*.py``) lowers them:

- ``bmm``: batched products with both operands batched, the attention shapes
  ``[b, T, hd] @ [b, hd, T]`` (scores) and ``[b, T, T] @ [b, T, hd]`` (context), ``b = B * H``
  (``torch.matmul`` folds the ``B, H`` axes of contiguous 4-D operands into one batch axis
  and calls ``bmm``);
- ``softmax``: ``F.softmax(x, dim=-1)`` (the lowering of ``Softmax``, axis -1);
- ``layernorm``: ``F.layer_norm(x, (d,), w, b, eps)`` over the last axis (the lowering of
  ``LayerNormalization`` with one result and weights of the normalized shape);
- ``gelu``: ``F.gelu(x, approximate=...)`` with ``"tanh"`` (GPT-2) and ``"none"``;
- ``copy``: ``x.permute(p).contiguous()`` of a contiguous ``[1, T, H, hd]`` (``H = 16``) with
  ``p = (0, 2, 1, 3)`` (queries, values, the heads merged back) and ``(0, 2, 3, 1)`` (keys):
  the copy ``torch.matmul`` makes of a permuted 4-D operand before ``bmm`` (``reshape``
  cannot view it, so it copies into a contiguous tensor), and which a ``Reshape`` merging
  permuted axes makes too; and an image batch's ``[N, C, S, S]`` to ``[N, S, S, C]`` and
  back (``copy_0231 s<S>``, ``copy_0312 s<S>``).

Rows follow ``bench.Row``. A ``bmm`` row's ``m``, ``n``, ``k`` are per product and its
``flops`` is ``2 * batch * m * n * k`` (the batch is ``flops / (2mnk)``); ``bytes`` counts
every operand and result over the batch. The kernel rows' ``bytes`` are what the
simulator's cost rule counts: every input (weights included) and result, read or written
once. Held out: one ``bmm`` configuration in four; the 1.5 x 2^k sizes of the kernels.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from calibration.bench import TORCH_DTYPES, Row, Timer, _split, size_ladder

__all__ = ["attention_shapes", "kernel_sizes", "bench_bmm", "bench_kernels",
           "KERNEL_WIDTHS", "copy_axes"]

MAX_TENSOR_BYTES = 1 << 30
"""No benchmark tensor above 1 GiB (keeps the run short and within any GPU's memory)."""


def attention_shapes(quick: bool, cuda: bool) -> list[tuple[int, int, int]]:
    """``(batch, T, hd)`` of the attention products: on a GPU ``batch = B * H`` in
    {12, 32, 64, 128, 256}, ``T`` in {256, 1024, 2048}, ``hd`` in {64, 128}."""
    if quick:
        bs, ts, hds = [2, 8], [16, 64], [16, 32]
    elif cuda:
        bs, ts, hds = [12, 32, 64, 128, 256], [256, 1024, 2048], [64, 128]
    else:
        bs, ts, hds = [4, 16], [64, 128, 256], [32, 64]
    return [(b, t, hd) for b in bs for t in ts for hd in hds]


KERNEL_WIDTHS: dict[str, tuple[Any, ...]] = {
    "softmax": (128, 1024, 2048), "layernorm": (32, 64, 96, 192, 384, 768, 2048, 8192),
    "gelu": (0,),
    "copy": (64, 128, (32, 112), (96, 56), (192, 28), (384, 14), (768, 7))}
"""The last-axis lengths measured per kernel family: softmax rows (``T``), layer-norm width
(``d_model``, and a convolutional network's channels: ConvNeXt normalizes 96 to 768,
SegFormer 32 to 256), the head size of the copies; ``gelu`` is flat. A ``copy`` pair
``(channels, side)`` is an image batch's layout change, ``[N, C, S, S]`` to ``[N, S, S, C]``
and back (ConvNeXt's blocks and any model that puts a layer norm between convolutions)."""


def copy_axes(op: str, n: int, width: int) -> tuple[int, int]:
    """``(output's last axis, input's last axis)`` of a ``copy`` row (``op``, ``n``
    elements, its ``width``): what ``calibration.fit`` calls ``width`` and ``inner``, as
    ``distir.analysis.cost.compute.transpose`` reads them off a ``Transpose``."""
    name, *geo = op.split()
    side = {g[0]: int(g[1:]) for g in geo}.get("s")
    if side is not None:  # an image batch: width = channels
        return (width, side) if name == "copy_0231" else (side, width)
    if name == "copy_0231":  # [1, T, 16, hd] -> [1, 16, hd, T]
        return max(n // (16 * width), 1), width
    return width, width


def kernel_sizes(quick: bool, cuda: bool) -> list[tuple[int, str]]:
    """Element counts from 2^12 (2^10 quick) up (see ``bench.size_ladder``)."""
    return size_ladder(10, 16) if quick else size_ladder(12, 28 if cuda else 22)


def bench_bmm(device: Any, dtypes: list[str], shapes: list[tuple[int, int, int]],
              timer: Timer, log: Callable[[str], None],
              small: Sequence[tuple[int, int, int, int]] = ()) -> Iterator[Row]:
    """Time ``torch.matmul(a, b, out=c)`` on contiguous 3-D operands for both attention
    products of every ``(batch, T, hd)`` and dtype, then every ``(batch, m, n, k)`` of
    ``small`` (``bench_matmul_grad.small_batched_shapes``: op ``bmm_small``); one
    configuration in four held out."""
    import torch

    for dt in dtypes:
        tdt = getattr(torch, TORCH_DTYPES[dt])
        size = torch.empty((), dtype=tdt).element_size()
        cases = [(op, b, m, n, k) for b, t, hd in shapes if b * t * t * size <= MAX_TENSOR_BYTES
                 for op, (m, n, k) in (("bmm_qk", (t, t, hd)), ("bmm_pv", (t, hd, t)))]
        cases += [("bmm_small", b, m, n, k) for b, m, n, k in small]
        i = 0
        for op, b, m, n, k in cases:
            x = torch.randn(b, m, k, device=device, dtype=tdt)
            y = torch.randn(b, k, n, device=device, dtype=tdt)
            z = torch.empty(b, m, n, device=device, dtype=tdt)
            secs, reps = timer.time(lambda x=x, y=y, z=z: torch.matmul(x, y, out=z))
            del x, y, z
            yield Row("bmm", op, dt, secs, m, n, k, b * (m * k + k * n + m * n) * size,
                      2.0 * b * m * n * k, 1, reps, str(device), _split(i))
            i += 1
        log(f"bmm {dt}: {i} configurations")


def _kernel(family: str, width: Any, n: int, dtype: Any, device: Any,
            ) -> tuple[list[tuple[str, Callable[[], object]]], int]:
    """The calls measured for one family, width and element count, and the bytes each
    moves (inputs and results)."""
    import torch
    import torch.nn.functional as F

    size = torch.empty((), dtype=dtype).element_size()
    if family == "gelu":
        x = torch.randn(n, device=device, dtype=dtype)
        return ([("gelu_tanh", lambda: F.gelu(x, approximate="tanh")),
                 ("gelu", lambda: F.gelu(x))], 2 * n * size)
    if isinstance(width, tuple):  # an image batch's layout, both ways
        c, side = width
        images = max(n // (c * side * side), 1)
        x = torch.randn(images, c, side, side, device=device, dtype=dtype)
        y = torch.randn(images, side, side, c, device=device, dtype=dtype)
        return ([(f"copy_0231 s{side}", lambda: x.permute(0, 2, 3, 1).contiguous()),
                 (f"copy_0312 s{side}", lambda: y.permute(0, 3, 1, 2).contiguous())],
                2 * images * c * side * side * size)
    rows = max(n // width, 1)
    if family == "softmax":
        x = torch.randn(rows, width, device=device, dtype=dtype)
        return [("softmax", lambda: F.softmax(x, dim=-1))], 2 * rows * width * size
    if family == "layernorm":
        x = torch.randn(rows, width, device=device, dtype=dtype)
        w = torch.randn(width, device=device, dtype=dtype)
        b = torch.randn(width, device=device, dtype=dtype)
        return ([("layer_norm", lambda: F.layer_norm(x, (width,), w, b, 1e-5))],
                (2 * rows * width + 2 * width) * size)
    # copy: [1, T, H, hd] permuted to [1, H, T, hd] (or [1, H, hd, T]), made contiguous
    hd, heads = width, 16
    t = max(rows // heads, 1)
    x = torch.randn(1, t, heads, hd, device=device, dtype=dtype)
    return ([("copy_0213", lambda: x.permute(0, 2, 1, 3).contiguous()),
             ("copy_0231", lambda: x.permute(0, 2, 3, 1).contiguous())],
            2 * t * heads * hd * size)


def bench_kernels(device: Any, dtypes: list[str], sizes: list[tuple[int, str]], timer: Timer,
                  log: Callable[[str], None],
                  families: tuple[str, ...] = ("softmax", "layernorm", "gelu", "copy"),
                  ) -> Iterator[Row]:
    """Time every kernel family over ``(element count, split)`` sizes, each width of
    ``KERNEL_WIDTHS`` no larger than the size, and each dtype."""
    import torch

    for fam in families:
        count = 0
        for dt in dtypes:
            tdt = getattr(torch, TORCH_DTYPES[dt])
            size = torch.empty((), dtype=tdt).element_size()
            for n, split in sizes:
                if n * size > MAX_TENSOR_BYTES:
                    continue
                for width in KERNEL_WIDTHS[fam]:
                    least = (width[0] * width[1] ** 2 if isinstance(width, tuple) else
                             width * (16 if fam == "copy" else 1))
                    if least > n:
                        continue
                    calls, nbytes = _kernel(fam, width, n, tdt, device)
                    for op, fn in calls:
                        secs, reps = timer.time(fn)
                        yield Row(fam, op, dt, secs, n,
                                  width[0] if isinstance(width, tuple) else width, bytes=nbytes,
                                  flops=float(n), reps=reps, device=str(device), split=split)
                        count += 1
                    del calls
        log(f"{fam}: {count} measurements")
