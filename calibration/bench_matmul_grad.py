"""Matrix products with a transposed operand, and the embedding gradient's scatter-add: the
``matmul_tn``, ``matmul_nt``, ``bmm_nt``, ``bmm_tn`` and ``scatter_add_repeated`` families
of a profile.

The ``matmul`` fit is measured on ``a @ b`` with both operands contiguous (the layout cuBLAS
calls NN). A training step runs most of its products otherwise: the backend lowers
``MatMulGrad`` of a weight (``distir/backend/ops_train.py``) as

- ``da = torch.matmul(dy, b.t())``: ``b`` a contiguous ``(k, n)`` weight read transposed
  (layout NT), an ``(R x n) @ (n x k)`` product; the tied language-model head
  ``x @ wte.t()`` (``wte`` a contiguous ``(50257, d)`` table) is the same layout;
- ``db = torch.mm(a.reshape(-1, k).t(), dy.reshape(-1, n))``: the activations read
  transposed (layout TN), a ``(k x R) @ (R x n)`` product whose reduction runs over all
  ``R`` rows of the batch and sequence.

Each is timed here as the backend calls it, per dtype, over transformer and MLP shapes:
rows ``R`` (batch x sequence) 2^11 to 2^16, widths 768 to 8192 (pairs of the widths of
``WIDTHS``, e.g. 1024 x 3072 for an attention's fused projection, 1024 x 4096 for an MLP),
and language-model shapes with a vocabulary of 50257 (``x @ w.t()`` and the head's
gradient products). A row carries the product's ``m``, ``n``, ``k`` as the cost rules name
them: ``(m x k) @ (k x n)``; for ``matmul_tn`` ``m`` is the weight's input width, ``n`` its
output width and ``k`` the rows ``R``; for ``matmul_nt`` ``m = R``.

``bmm_nt`` and ``bmm_tn``: the same two calls on batched operands (both batched: an
attention's ``MatMulGrad``, lowered as ``torch.matmul(dy, b.mT)`` and ``torch.matmul(a.mT,
dy)``), over the products of an attention's gradients (``batched_shapes``), with the
operands contiguous; the ``bmm`` fit is measured on ``a @ b``, and on one H100 the scores'
gradient products ``(T x T) @ (T x hd)^T`` and ``(T x hd)^T @ (T x T)`` ran 1.7 times
longer than it predicts.

``scatter_add_repeated``: ``ScatterND`` with ``reduction="add"`` of ``R`` rows of width
``d`` into a ``(V, d)`` table (the embedding gradient), through the backend's own lowering
(PyTorch's embedding backward, then added to the table: ``ops_onnx._scatter_add_rows``),
with the indices the backend draws for integer inputs when it measures a step
(``distir/backend/worker.py``: integers in [0, 8)). Until 2026-11-27 the lowering was an
accumulating ``index_put_``, which adds each run of equal indices serially (with 8
distinct indices a GPT-2 batch of 32 x 1024 tokens took milliseconds; BERT's token-type
gradient, every row into row 0, 10.7 ms on an H200); profiles measured before then
describe that kernel. The same shapes with indices drawn over the whole table are measured
too, as rows of the existing ``scatter_add`` family (``calibration/bench_train.py``'s,
fitted by bytes). A row's ``m`` is ``R``, ``n`` the width ``d``, ``k`` the table's rows
``V``; ``bytes`` every input and result of the op, as the cost rule counts them.

Held out: one product shape in four; the 1.5 x 2^k row counts of the scatter-adds.
``--only layouts|batched|scatter`` measures a part.

    python -m calibration.bench_matmul_grad -o matmul_grad.csv [--quick] [--cpu]
    python -m calibration.bench_matmul_grad --merge matmul_grad.csv PROFILE.measurements.csv

writes the rows in the measurements-CSV format; ``--merge`` adds those of the three families
to a profile's measurements, to refit with ``python -m calibration --fit-only``
(``calibration/README.md``). About a minute
and a half on one H100; seconds on a CPU with ``--quick``.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Callable, Iterator
from typing import Any

from calibration.bench import (
    TORCH_DTYPES,
    Row,
    Timer,
    _split,
    off_grid_dims,
    sample_shapes,
    size_ladder,
)

__all__ = ["LAYOUTS", "BATCHED", "WIDTHS", "VOCAB", "MERGED", "product_shapes",
           "batched_shapes", "small_batched_shapes", "scatter_shapes", "bench_layouts",
           "bench_batched", "bench_scatter", "bench_all", "merge", "main"]

LAYOUTS = ("matmul_tn", "matmul_nt")
"""``matmul_tn``: ``a.t() @ dy`` (a weight's gradient); ``matmul_nt``: ``x @ w.t()`` (an
input's gradient, a tied LM head)."""

WIDTHS = (768, 1024, 1536, 2048, 3072, 4096, 6144, 8192)
"""The layer widths of the sweep (GPT-2 small to 1.6B, their 3x and 4x projections, MLPs)."""

VOCAB = 50257
"""GPT-2's vocabulary: the LM head's unaligned width."""

MAX_FLOPS = 1.1e12
"""The largest product of the sweep (FLOPs), as the ``matmul`` sweep; LM-head shapes in 16
bits may reach ``MAX_LM_FLOPS``."""
MAX_LM_FLOPS = 3.5e12
MAX_TENSOR_BYTES = 1 << 30


def product_shapes(layout: str, quick: bool, cuda: bool, count: int, seed: int = 0,
                   off_grid: bool = False) -> list[tuple[int, int, int]]:
    """``count`` distinct ``(rows, k_in, n_out)`` of a layer ``y = x @ w``, ``x`` of ``rows x
    k_in``, drawn from the rows 2^8 to 2^16 (a pipeline's microbatch of one 512-token
    sequence has 512; the fits extrapolated below 2^11 until 2026-11-28, pricing such weight
    gradients up to 1.5x the plain products) and pairs of ``WIDTHS``, each product at most
    ``MAX_FLOPS``; then LM-head shapes (``n_out = VOCAB``, or ``k_in = VOCAB`` for the
    head's input gradient), on a GPU only. Small sizes with ``quick`` or on a CPU. With
    ``off_grid``, only random shapes, rows any multiple of 8 and widths any multiple of 64
    over the same ranges (``calibration.bench.off_grid_dims``)."""
    rng = random.Random(seed + (0 if layout == "matmul_tn" else 1))
    if off_grid:
        rows_lo, rows_hi, w_lo, w_hi, cap = ((64, 256, 32, 96, 5e7) if quick else
                                             (256, 65536, 768, 8192, MAX_FLOPS) if cuda
                                             else (256, 2048, 64, 512, 2e9))
        return sample_shapes(rng, (off_grid_dims(rows_lo, rows_hi, 8),
                                   off_grid_dims(w_lo, w_hi, 64 if cuda and not quick else 8),
                                   off_grid_dims(w_lo, w_hi, 64 if cuda and not quick else 8)),
                             count, cap)
    if quick or not cuda:
        rows_ax = [64, 128, 256] if quick else [256, 512, 1024, 2048]
        widths = [32, 48, 64, 96] if quick else [64, 128, 256, 384, 512]
        max_flops = 5e7 if quick else 2e9
    else:
        rows_ax = [1 << e for e in range(8, 17)]
        widths = list(WIDTHS)
        max_flops = MAX_FLOPS
    out = sample_shapes(rng, (rows_ax, widths, widths), count, max_flops)
    shapes = set(out)
    if cuda and not quick:
        for r in (512, 8192, 32768):  # a layer's products: attention, fused QKV, MLP
            for d in (768, 1024, 2048):
                for s in ((d, d), (d, 3 * d), (d, 4 * d), (4 * d, d)):
                    if (r, *s) not in shapes and 2.0 * r * s[0] * s[1] <= max_flops:
                        out.append((r, *s))
        for r in (2048, 8192, 32768):
            for d in (768, 1024, 2048):
                if 2.0 * r * d * VOCAB <= MAX_LM_FLOPS:
                    # tn: the head's weight gradient; nt: the gradient of the head's input
                    # through an untied (d, VOCAB) weight
                    out.append((r, d, VOCAB))
                    if layout == "matmul_nt":  # the tied head x @ wte.t()
                        out.append((r, VOCAB, d))
    return out


def _layout_case(layout: str, rows: int, k_in: int, n_out: int, tdt: Any, device: Any,
                 ) -> tuple[Callable[[], Any], tuple[int, int, int]]:
    """The call the backend makes and its ``(m, n, k)``."""
    import torch

    if layout == "matmul_tn":  # db = a^T @ dy: (k_in x rows) @ (rows x n_out)
        a = torch.randn(rows, k_in, device=device, dtype=tdt)
        dy = torch.randn(rows, n_out, device=device, dtype=tdt)
        return (lambda: torch.mm(a.t(), dy)), (k_in, n_out, rows)
    # da = dy @ b.t(): (rows x n_out) @ (n_out x k_in), b a contiguous (k_in, n_out); and x
    # @ w.t() with w a contiguous (n, k): the same call
    x = torch.randn(rows, n_out, device=device, dtype=tdt)
    w = torch.randn(k_in, n_out, device=device, dtype=tdt)
    return (lambda: torch.matmul(x, w.t())), (rows, k_in, n_out)


def bench_layouts(device: Any, dtypes: list[str], quick: bool, timer: Timer,
                  log: Callable[[str], None], count: int, off_grid: bool = False,
                  seed: int = 0) -> Iterator[Row]:
    """Time both layouts for every shape and dtype (``product_shapes`` of ``seed``); one
    shape in four is held out."""
    import torch

    cuda = device.type == "cuda"
    for layout in LAYOUTS:
        shapes = product_shapes(layout, quick, cuda, count, seed, off_grid=off_grid)
        for dt in dtypes:
            tdt = getattr(torch, TORCH_DTYPES[dt])
            size = torch.empty((), dtype=tdt).element_size()
            done = 0
            for i, (rows, k_in, n_out) in enumerate(shapes):
                m, n, k = (k_in, n_out, rows) if layout == "matmul_tn" else (rows, k_in, n_out)
                flops = 2.0 * m * n * k
                if VOCAB in (k_in, n_out) and (dt == "Float32" and flops > MAX_FLOPS):
                    continue
                call, _ = _layout_case(layout, rows, k_in, n_out, tdt, device)
                secs, reps = timer.time(call)
                del call
                yield Row(layout, "mm(a.t(), dy)" if layout == "matmul_tn" else
                          "matmul(x, w.t())", dt, secs, m, n, k,
                          (m * k + k * n + m * n) * size, flops, 1, reps, str(device),
                          _split(i))
                done += 1
            log(f"{layout} {dt}: {done} shapes")


BATCHED = ("bmm_nt", "bmm_tn")
"""Batched products (both operands batched: attention) with an operand read transposed, as
``MatMulGrad``'s general lowering runs them on contiguous operands: ``bmm_nt``
``torch.matmul(dy, b.mT)``, ``bmm_tn`` ``torch.matmul(a.mT, dy)``."""


def batched_shapes(layout: str, quick: bool, cuda: bool) -> list[tuple[int, int, int, int]]:
    """``(batch, m, n, k)`` of the products an attention's gradients make, sequence ``T``
    and head width ``hd``: for ``bmm_nt`` ``(T, hd, T)`` (the scores' ``da``) and ``(T, T,
    hd)`` (the context's ``da``), for ``bmm_tn`` ``(hd, T, T)`` and ``(T, hd, T)``; batch
    (batch x heads) 12 to 512, ``T`` 256 to 2048, ``hd`` 64 and 128; then short sequences
    in many products (windowed attention, Swin's 7 x 7 windows; a ViT's 197 tokens): ``T``
    49, 64, 144 and 197, ``hd`` 32 and 64, batch (images x windows x heads) 96 to 24,576
    (added 2026-11-28: a fit of the first kind priced Swin-T's 24,576 products of 49 x 32
    six times their time); at most 1 GiB a float32 operand. Small with ``quick`` or on a
    CPU."""
    if quick:
        grids = [((2, 4), (16, 32), (8,))]
    elif not cuda:
        grids = [((2, 4, 8), (32, 64, 128), (16, 32))]
    else:
        grids = [((12, 32, 64, 128, 256, 512), (256, 512, 1024, 2048), (64, 128)),
                 ((96, 384, 1536, 6144, 24576), (49, 64, 144, 197), (32, 64))]
    out = []
    for batches, seqs, heads in grids:
        for b in batches:
            for t in seqs:
                for hd in heads:
                    for m, n, k in (((t, hd, t), (t, t, hd)) if layout == "bmm_nt"
                                    else ((hd, t, t), (t, hd, t))):
                        if b * max(m * n, m * k, k * n) * 4 <= MAX_TENSOR_BYTES and \
                                (b, m, n, k) not in out:  # (T = hd gives one twice)
                            out.append((b, m, n, k))
    return out


def small_batched_shapes(quick: bool, cuda: bool, count: int = 160, seed: int = 0,
                         ) -> list[tuple[int, int, int, int]]:
    """``count`` random ``(batch, m, n, k)`` of small products in many batches: ``m``,
    ``n`` and ``k`` from 1 to 256, one of them at most 16 (matrix-vector products among
    them), batch 1,024 to 131,072, at most 1 GiB an operand. ConvBERT's span-based
    convolution multiplies each token's ``[64 x 9]`` slice of its unfolded neighbours by
    its ``[9 x 1]`` kernel, 49,152 such products a layer at 16 x 512 tokens; the
    gradient's ``a^T @ dy`` (``9 x 64`` by ``64 x 1``) takes 267 us on an H200, which
    fits of attention's shapes priced at a sixth (``grid_search/results/strided_reduce/``).
    Small with ``quick`` or on a CPU."""
    if quick:
        return [(64, 16, 1, 9)]
    rng = random.Random(seed + 29)
    dims = (1, 2, 4, 9, 16, 32, 64, 128, 256)
    # (cuBLAS changes kernels with the batch: 8,192 products of 16 x 64 by 64 x 1 took 11
    # us, 65,536 of them 359; samples after the first draw between the powers of two too)
    batches = (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072) if seed == 0 else \
        (1024, 2048, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152, 65536, 98304,
         131072)
    batches = batches if cuda else (16, 64)
    out: list[tuple[int, int, int, int]] = []
    for _ in range(count * 20):
        if len(out) >= (count if cuda else 8):
            break
        b, m, n, k = rng.choice(batches), rng.choice(dims), rng.choice(dims), rng.choice(dims)
        if min(m, n, k) > 16 or b * max(m * n, m * k, k * n) * 4 > MAX_TENSOR_BYTES or \
                (b, m, n, k) in out:
            continue
        out.append((b, m, n, k))
    return out


def bench_batched(device: Any, dtypes: list[str], quick: bool, timer: Timer,
                  log: Callable[[str], None], seed: int = 0) -> Iterator[Row]:
    """Time both batched layouts for every shape (``batched_shapes``, then
    ``small_batched_shapes`` of ``seed``) and dtype; one shape in four held out. A
    row's ``m``, ``n``, ``k`` are per product and its batch is ``flops / (2mnk)``, as the
    ``bmm`` rows."""
    import torch

    cuda = device.type == "cuda"
    for layout in BATCHED:
        shapes = batched_shapes(layout, quick, cuda) + small_batched_shapes(quick, cuda,
                                                                             seed=seed)
        for dt in dtypes:
            tdt = getattr(torch, TORCH_DTYPES[dt])
            size = torch.empty((), dtype=tdt).element_size()
            for i, (b, m, n, k) in enumerate(shapes):
                if layout == "bmm_nt":  # dy (b, m, k) @ w.mT, w (b, n, k)
                    x = torch.randn(b, m, k, device=device, dtype=tdt)
                    y = torch.randn(b, n, k, device=device, dtype=tdt)
                    secs, reps = timer.time(lambda x=x, y=y: torch.matmul(x, y.mT))
                else:  # a.mT @ dy: a (b, k, m), dy (b, k, n)
                    x = torch.randn(b, k, m, device=device, dtype=tdt)
                    y = torch.randn(b, k, n, device=device, dtype=tdt)
                    secs, reps = timer.time(lambda x=x, y=y: torch.matmul(x.mT, y))
                del x, y
                yield Row(layout, "matmul(dy, b.mT)" if layout == "bmm_nt" else
                          "matmul(a.mT, dy)", dt, secs, m, n, k,
                          b * (m * k + k * n + m * n) * size, 2.0 * b * m * n * k, 1, reps,
                          str(device), _split(i))
            log(f"{layout} {dt}: {len(shapes)} shapes")


def scatter_shapes(quick: bool, cuda: bool) -> list[tuple[int, int, int, str]]:
    """``(rows, width, table, split)``: updates of ``rows x width`` into a ``table x width``
    table; rows from 2^11 to 2^16 (1.5 x 2^k held out), widths 768, 1024, 2048, tables of
    GPT-2's vocabulary and of 8192 rows. Small with ``quick`` or on a CPU."""
    if quick:
        return [(r, 16, 100, s) for r, s in size_ladder(6, 9)]
    if not cuda:
        return [(r, w, t, s) for r, s in size_ladder(6, 10) for w in (16, 64)
                for t in (100, 1000)]
    return [(r, w, t, s) for r, s in size_ladder(11, 16) for w in (768, 1024, 2048)
            for t in (VOCAB, 8192)]


def bench_scatter(device: Any, dtypes: list[str], shapes: list[tuple[int, int, int, str]],
                  timer: Timer, log: Callable[[str], None],
                  spread: bool = True) -> Iterator[Row]:
    """Time ``ScatterND(reduction="add")`` through the backend's lowering, with indices in
    [0, 8) (``scatter_add_repeated``) and, with ``spread``, over the whole table (rows of
    ``scatter_add``, for comparison)."""
    import torch

    from calibration.bench_train import DeviceTimer, _compile, _inputs, _nbytes, _one_op
    from distir.ir import DType

    dtimer = DeviceTimer(timer)
    for dt in dtypes:
        ddt = DType[dt]
        count = 0
        for rows, width, table, split in shapes:
            if max(rows, table) * width * ddt.itemsize > MAX_TENSOR_BYTES:
                continue
            fn = _one_op("ScatterND", [("data", ddt, (table, width)),
                                       ("idx", DType.Int64, (rows, 1)),
                                       ("upd", ddt, (rows, width))], 1, reduction="add")
            kernel = _compile(fn, device)
            nbytes = _nbytes(fn)
            for fam, bound in (("scatter_add_repeated", 8), ("scatter_add", table))[
                    :2 if spread else 1]:
                args = _inputs(fn, {"idx": min(bound, table)}, device)
                with torch.inference_mode():
                    secs, reps = dtimer.time(lambda k=kernel, a=args: k(*a))
                yield Row(fam, f"ScatterND add idx<{min(bound, table)}", dt, secs, rows,
                          width, table, bytes=nbytes, flops=float(rows * width), reps=reps,
                          device=str(device), split=split)
                count += 1
                del args
            del kernel
        log(f"scatter_add {dt}: {count} measurements")


MERGED = (*LAYOUTS, *BATCHED, "scatter_add_repeated")
"""The families ``merge`` adds to a profile's measurements; the table-wide ``scatter_add``
rows are for comparison (``bench_train``'s rows of that family stay the fitted ones)."""


def merge(bench_csv: str, measurements_csv: str) -> int:
    """Append the ``MERGED`` rows of ``bench_csv`` to ``measurements_csv`` (replacing its
    earlier rows of those families) and name the benchmark in its header's ``command``;
    returns the number of rows added."""
    from pathlib import Path

    from calibration.calibrate import read_measurements, write_measurements

    new, meta_new = read_measurements(bench_csv)
    old, meta = read_measurements(measurements_csv)
    add = [r for r in new if r["family"] in MERGED]
    fams = [f for f in MERGED if any(r["family"] == f for r in add)]
    names = ", ".join(fams[:-1]) + (" and " if len(fams) > 1 else "") + fams[-1] if fams else ""
    note = (f"{names} rows from `{meta_new.get('command')}` on one "
            f"{meta_new.get('device_name')} ({float(meta_new.get('wall_s', 0.0)):.1f} s)")
    if note not in str(meta.get("command", "")):
        meta["command"] = f"{meta.get('command', '')}; {note}".lstrip("; ")
        meta["gpu_seconds"] = (float(meta.get("gpu_seconds", 0.0))
                               + float(meta_new.get("gpu_seconds", 0.0)))
    rows = [r for r in old if r["family"] not in fams] + add
    path = Path(measurements_csv)
    crlf = b"\r\n" in path.read_bytes()[:1 << 16]
    write_measurements(path, rows, meta)
    if not crlf:  # keep the file's line endings (the csv module writes CRLF)
        path.write_bytes(path.read_bytes().replace(b"\r\n", b"\n"))
    return len(add)


def bench_all(device: Any, dtypes: list[str], quick: bool, timer: Timer,
              log: Callable[[str], None], shapes: int | None = None,
              off_grid: bool = False, seed: int = 0) -> Iterator[Row]:
    """Every family ``merge`` adds (``MERGED``), as ``distir calibrate`` measures them:
    ``shapes`` random product shapes per layout (default 64 on a GPU, 12 else; off the
    grid with ``off_grid``: ``product_shapes``; another sample with another ``seed``)."""
    cuda = device.type == "cuda"
    count = shapes or (6 if quick else 64 if cuda else 12)
    yield from bench_layouts(device, dtypes, quick, timer, log, count, off_grid, seed)
    yield from bench_batched(device, dtypes, quick, timer, log, seed)
    yield from bench_scatter(device, dtypes, scatter_shapes(quick, cuda), timer, log,
                             spread=False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m calibration.bench_matmul_grad",
                                 description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--output", help="the measurements CSV to write")
    ap.add_argument("--merge", nargs=2, metavar=("BENCH_CSV", "MEASUREMENTS_CSV"),
                    help="measure nothing: append the rows of matmul_tn, matmul_nt and "
                         "scatter_add_repeated of BENCH_CSV to a profile's MEASUREMENTS_CSV")
    ap.add_argument("--quick", action="store_true", help="small sizes (seconds on a CPU)")
    ap.add_argument("--cpu", action="store_true", help="measure the CPU even with CUDA")
    ap.add_argument("--only", choices=("layouts", "batched", "scatter"), action="append",
                    help="measure only these parts (repeatable; default all): the products "
                         "with a transposed operand, their batched forms, the scatter-adds")
    ap.add_argument("--shapes", type=int, default=0,
                    help="random product shapes per layout (default 64 on a GPU, 12 else)")
    args = ap.parse_args(argv)
    if args.merge:
        added = merge(*args.merge)
        print(f"merged {added} measurements into {args.merge[1]}")
        return 0
    if not args.output:
        ap.error("give -o FILE (or --merge BENCH_CSV MEASUREMENTS_CSV)")
    import time
    from pathlib import Path

    import torch

    from calibration.calibrate import _machine, write_measurements

    cuda = torch.cuda.is_available() and not args.cpu
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    timer = Timer(device, target_s=0.01 if cuda else 0.002, trials=3)
    dtypes = ["Float16", "BFloat16", "Float32"] if cuda else ["Float32"]
    count = args.shapes or (64 if cuda and not args.quick else 12)

    def log(s: str) -> None:
        print(s, file=sys.stderr, flush=True)

    parts = args.only or ["layouts", "batched", "scatter"]
    t0 = time.perf_counter()
    rows = []
    if "layouts" in parts:
        rows += [r.as_dict() for r in bench_layouts(device, dtypes, args.quick, timer, log,
                                                    count)]
    if "batched" in parts:
        rows += [r.as_dict() for r in bench_batched(device, dtypes, args.quick, timer, log)]
    if "scatter" in parts:
        rows += [r.as_dict() for r in bench_scatter(
            device, dtypes, scatter_shapes(args.quick, cuda), timer, log)]
    machine = _machine(cuda)
    wall = time.perf_counter() - t0
    command = "python -m calibration.bench_matmul_grad" + "".join(
        f" --only {p}" for p in args.only or ())
    machine.update(command=command, wall_s=wall, gpu_seconds=wall if cuda else 0.0)
    write_measurements(Path(args.output), rows, machine)
    print(f"wrote {len(rows)} measurements to {args.output} in {wall:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
