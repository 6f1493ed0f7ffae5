"""Microbenchmarks of the kernels a training step runs besides matrix products, timed as
the PyTorch backend runs them: each measurement builds a one-op DistIR function, compiles
it with the backend's own lowering (``distir.backend.lowering.compile_program``) and times
the op's kernel on prepared inputs, so that what is measured is what a step executes
(several ATen calls where the lowering makes several).

Families (each a fit of its own in the profile; the cost rules of ``distir.analysis.cost``
use them where a profile has them, else the ``elementwise`` fit or the roofline):

- per dtype, with the features of the forward convolution's implicit GEMM (``m = N *
  output pixels``, ``n = M``, ``k = C / group * kernel size``) and ``window`` (kernel
  size), ``stride``: ``conv`` (``Conv``, cuDNN), ``conv_dgrad`` and ``conv_wgrad``
  (``ConvGrad`` computing only ``dx`` / only ``dw``: ``aten.convolution_backward``);
  a row's ``op`` is ``conv k{kernel elements} s{stride} n{batch} c{input channels}
  p{output pixels per image}`` (``conv_geometry``), features ``batch``, ``cin``, ``pixels``;
  of more than one group, ``conv_grouped`` and its two gradients; each of the six again
  with channels-last inputs (``x`` and ``dy`` in PyTorch's ``channels_last`` memory
  format, the weight contiguous): ``conv_nhwc``, ``conv_grouped_nhwc`` and their
  ``_dgrad`` / ``_wgrad`` (``NHWC_CONV_FAMILIES``), the kernels cuDNN runs where a
  program hands a convolution a permuted view (a ``[B, H * W, C]`` token tensor
  transposed and reshaped to ``[B, C, H, W]``);
- memory-bound, under ``any`` with the feature ``bytes`` (every input and result of the op,
  read or written once, as the cost rules count them; the batch normalizations also
  ``channels`` and ``spatial``, pixels per image: ``norm_features``): ``batchnorm``
  (training mode, three results), ``batchnorm_grad``, ``layernorm_grad``,
  ``softmax_grad``, ``cross_entropy`` and ``cross_entropy_grad``
  (``SoftmaxCrossEntropyLoss[Grad]`` over the last axis),
  ``adam`` (``AdamOptimizer``, the step count a runtime value), ``scatter_add``
  (``ScatterND`` with ``reduction="add"`` of rows into a table: the embedding gradient),
  ``scatter_add_few`` (the same of one index row into a table of 3 or 16 long rows: the
  backend's ``index_add``, ``FEW_SCATTER_ROWS``; `nn.MultiheadAttention`'s query / key /
  value gradients out of its packed projection),
  ``reduce`` (``ReduceSum`` over the leading axis, and over the batch and pixels of
  ``[N, C, pixels]``: bias gradients), ``maxpool``,
  ``maxpool_grad`` (3 x 3 windows, stride 2), ``avgpool``, ``avgpool_grad`` (3 x 3
  windows of stride 1, PoolFormer's token mixer, and 2; since 2026-11-28, when an
  ``AveragePool`` was still priced at the memory bandwidth, 12 x below its time), ``where``
  (``Where`` of a mask, a tensor and a zero: a ReLU6's gradient) and ``pad`` (a constant
  ``Pad`` of one pixel around each image of ``[N, C, S, S]``); ``gather_elements`` and
  ``scatter_elements`` (``GatherElements`` and an adding ``ScatterElements`` along the
  last axis, index int64: ``_INDEXED``; a row's ``n`` the data's length along that axis,
  its op ``... i<broadcast>``, how many times the index is broadcast, 1 for a dense one).

Held out: the 1.5 x 2^k sizes of the memory-bound families, one convolution in four.

Timed by ``DeviceTimer`` on a GPU: the kernels' device time, without the host's launch
time (in a training step the host runs ahead of the GPU), with the L2 cache flushed
before each call for the families of ``COLD``, as one of a sequence of calls on distinct
operands for those of ``SEQUENCE`` (Adam's updates); back-to-back on a CPU.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from calibration.bench import Row, Timer, _split

__all__ = ["DeviceTimer", "bench_train_kernels", "bench_convs", "conv_shapes",
           "patch_conv_shapes", "conv1d_shapes", "TRAIN_FAMILIES", "CONV_FAMILIES",
           "GROUPED_CONV_FAMILIES", "CONV1D_FAMILIES",
           "NHWC_CONV_FAMILIES", "NHWC_GROUPED_CONV_FAMILIES", "conv_family",
           "grouped_conv_shapes", "conv_geometry", "norm_features"]

TRAIN_FAMILIES = ("batchnorm", "batchnorm_grad", "layernorm_grad", "softmax_grad",
                  "cross_entropy", "cross_entropy_grad", "adam", "scatter_add", "reduce",
                  "maxpool", "maxpool_grad", "avgpool", "avgpool_grad", "scatter_add_few",
                  "where", "pad", "groupnorm", "gather_elements", "scatter_elements",
                  "concat")
CONV_FAMILIES = ("conv", "conv_dgrad", "conv_wgrad")
GROUPED_CONV_FAMILIES = ("conv_grouped", "conv_grouped_dgrad", "conv_grouped_wgrad")
"""The same kernels of convolutions of more than one group (depthwise: one per channel),
which cuDNN runs by other kernels, far from a product of the implicit GEMM's sizes."""
CONV1D_FAMILIES = ("conv1d", "conv1d_dgrad", "conv1d_wgrad")
"""1-D convolutions (``[N, C, L]``), dense and grouped in one family each (``groups`` a
feature): audio models' feature extractors and positional convolutions, which cuDNN runs
by other kernels than 2-D ones of the same sizes (``conv1d_shapes``)."""
NHWC_CONV_FAMILIES = ("conv_nhwc", "conv_nhwc_dgrad", "conv_nhwc_wgrad")
NHWC_GROUPED_CONV_FAMILIES = ("conv_grouped_nhwc", "conv_grouped_nhwc_dgrad",
                              "conv_grouped_nhwc_wgrad")
"""The same six kernels with ``x`` and ``dy`` channels-last (``conv_family``)."""


def conv_family(role: str, grouped: bool, channels_last: bool) -> str:
    """The profile family of a convolution kernel: ``role`` one of ``conv``, ``dgrad``,
    ``wgrad``; ``conv_grouped...`` for more than one group; ``..._nhwc...`` for a
    channels-last input."""
    name = "conv_grouped" if grouped else "conv"
    if channels_last:
        name += "_nhwc"
    return name if role == "conv" else f"{name}_{role}"
MAX_TENSOR_BYTES = 1 << 30

_INDEXED = ((64, 64, 1), (64, 64, 16), (512, 512, 1), (512, 512, 64), (4096, 256, 1),
            (4096, 256, 16), (32, 1024, 1), (32, 1024, 8), (1024, 1024, 1), (1024, 1024, 16))
"""``GatherElements`` / adding ``ScatterElements`` along the last axis: ``(the data's
length along it, the index's, how many times the index is broadcast)``, the data
``[broadcast, rows, length]``; a broadcast index is a view of stride 0 over the leading
axis (an ``Expand``'s, as exports build position or token indices once and expand them
over batch and heads), 1 a dense index of random positions."""

_WIDTHS: dict[str, tuple[Any, ...]] = {
    "batchnorm": (0,), "batchnorm_grad": (0,),
    "layernorm_grad": (32, 64, 96, 192, 384, 768, 2048, 8192),
    "softmax_grad": (128, 1024, 2048),
    "cross_entropy": (1000, 50257), "cross_entropy_grad": (1000, 50257),
    "adam": (1,), "scatter_add": (768, 2048),
    "reduce": (32, 64, 96, 128, 256, 384, 768, 4096, (32, 12544), (96, 3136), (144, 784),
               (384, 196), (960, 49), (256, 1024), (768, 197), (1024, 128),
               (8, 64, 32), (12, 197, 64), (16, 512, 64), (32, 128, 128)),
    "maxpool": (64, 256), "maxpool_grad": (64, 256),
    "avgpool": ((64, 1), (64, 2), (256, 1), (256, 2)),
    "avgpool_grad": ((64, 1), (64, 2), (256, 1), (256, 2)),
    "scatter_add_few": (3, 16), "where": (1,),
    "pad": ((16, 8), (32, 112), (96, 56), (144, 56), (192, 28), (576, 14), (960, 7)),
    "groupnorm": ((64, 1, 56), (128, 1, 28), (320, 1, 14), (512, 1, 7), (256, 32, 56),
                  (512, 32, 28), (1024, 32, 14), (2048, 32, 7), (64, 64, 56),
                  (256, 256, 14), (512, 512, 7), (1, 1, 448), (8, 1, 16), (32, 32, 8)),
    "gather_elements": _INDEXED, "scatter_elements": _INDEXED,
    "concat": (((1, 255), 128), ((1, 199), 197), ((2, 62), 66), ((64, 63), 1),
               ((128, 128), 1), ((1, 196), 768), ((96, 96), 3136), ((384, 384), 49),
               ((256, 256, 256), 64), ((32, 32, 32, 32), 49), ((3, 13), 101),
               ((17, 15), 33), ((1, 255), 128, 1), ((1, 199), 197, 1), ((63, 64), 1, 1),
               ((64, 64), 1, 1), ((2, 62), 66, 1), ((1, 196), 768, 1),
               ((1, 255), 128, 1, 4), ((1, 199), 197, 1, 4), ((1, 199), 197, 0, 4),
               ((63, 64), 1, 1, 4), ((64, 64), 1, 0, 4), ((2, 62), 66, 1, 4))}
"""The widths per family: channels (pools), the normalized or softmax axis, the classes,
the embedding width, the reduced rows' width, the table's rows (``scatter_add_few``); the
batch normalizations take ``_CNN``; a ``pad`` pair is ``(channels, image side)``. A
``reduce`` pair ``(channels, pixels)`` is a convolution's bias gradient, ``[N, channels,
pixels]`` summed to ``[channels]`` (the row's op ``ReduceSum i<pixels>``), or in memory
order a transposed ``[N, tokens, channels]`` tensor's bias gradient; a ``reduce`` triple
``(heads, tokens, head width)`` is ``[N, heads, tokens, head width]`` summed to ``[heads,
head width]`` (a per-head bias's gradient: reduced axes between kept ones; the row's op
``ReduceSum run<head width> mid<tokens>``, its width the kept elements); a plain width,
rows ``[N, width]`` summed over ``N``. An average pool's pair is ``(channels, stride)``
(the row's op ``AveragePool i<stride>``). A ``groupnorm`` triple is ``(channels, groups,
image side)`` (one group: PoolFormer's norms, exported as an ``InstanceNormalization`` of
one channel; 32: BiT's; one per channel: instance norms; the row's width is a group's
elements, its op ``GroupNormalization i<pixels>``). A ``concat`` pair is ``(the parts'
lengths along the axis, the elements after it)``: ``[rows, length, inner]`` parts
concatenated along axis 1 (a row or token prepended: a relative-position shift, a class
token; channels of images; the last axis, ``inner`` 1), the row's op ``Concat p<parts>
i<inner> a<1 where every part's slice is a multiple of 16 bytes, else 0>``, its width the
result's length along the axis; a third element of 1 marks the first part as a zero
tensor expanded from a scalar (a view of stride 0, as exports pad a relative-position
shift: the op's ``s1``), a fourth (4) splits the rows in two axes, ``[rows / 8, 8,
length, inner]`` (``r4``: ``cat``'s kernel indexes by the result's rank)."""

COLD: frozenset[str] = frozenset()
"""Families timed with the L2 cache flushed before each call (``DeviceTimer.cold``)."""

AFTER_WRITER = frozenset({"reduce"})
"""Families timed right after their first input is written (``DeviceTimer.after_writer``),
as a step runs a reduction after the op that computed what it reduces."""

SEQUENCE = frozenset({"adam"})
"""Families timed as a replayed step runs them (``_in_sequence``): one call after another
on distinct operands, as many as make four times the L2 cache, captured as a CUDA graph,
the time per call. A step ends with one Adam update per parameter back to back, its
parameters, gradients and moments none of them touched since the backward pass; the
kernel runs one block of 512 threads per 65,536 elements, so up to about 8 M elements (a
block per SM) one block's latency decides. A cold single call (``DeviceTimer.cold``)
prices an update of 2,048 elements at the flush's own cost (11 us on an H200, 2.8 us in a
step) and one of 65,536 to 1 M at 43-51 us, where a training step's take 34-37 with the
copies (``grid_search/results/adam_step/``). Their second moments are positive and their
step count 1, as in training (``_inputs``): with moments drawn from a normal distribution,
as the runner drew them before, the kernel runs at half its speed. (``index_adam``'s call C,
whose fit ``h200-sxm-graph`` has, drew counts of ``|N(0, 1)| + 0.1``; fractional positive
counts run at the speed of whole ones, ``adam_step/call_a/adam_values.txt``.)"""


def _in_sequence(dtimer: DeviceTimer, kernel: Callable[..., Any], args: list[Any], fn: Any,
                 bounds: dict[str, int], device: Any) -> tuple[float, int]:
    """Device time per call of ``kernel`` run on ``k`` distinct sets of operands one after
    another, ``k`` (at most 64) making the operands four times the GPU's L2 cache, replayed
    as a CUDA graph (``DeviceTimer.replayed``): the calls of a step's optimizer, each on
    tensors last touched long before. On a CPU, the time of one call."""
    t = dtimer.timer
    if not t.cuda:
        return dtimer.time(lambda: kernel(*args))
    props = t.torch.cuda.get_device_properties(t.device)
    l2 = int(getattr(props, "L2_cache_size", 0) or 0) or (64 << 20)
    per_set = sum(a.numel() * a.element_size() for a in args)
    k = max(1, min(64, -(-4 * l2 // max(per_set, 1))))
    sets = [args] + [_inputs(fn, bounds, device) for _ in range(k - 1)]

    def run() -> None:
        for a in sets:
            kernel(*a)

    secs, reps = dtimer.replayed(run)
    return secs / k, reps * k

_CNN = ((64, 112), (256, 56), (128, 28), (512, 28), (1024, 14), (2048, 7), (16, 8))
"""``(channels, image size)`` of the batch normalizations: a CNN's stages, so that the time's
dependence on the channel count (per-channel reductions) is measured; the batch is what
the size leaves (at least 1)."""


def norm_features(op: str, channels: int, nbytes: float) -> dict[str, float]:
    """The features of a batch-normalization fit: ``bytes``, ``channels`` and ``spatial``
    (pixels per image, from the row's ``op``, ``BatchNormalization h56``)."""
    h = int(op.split()[1][1:]) if len(op.split()) > 1 else 1
    return {"bytes": float(nbytes), "channels": float(channels), "spatial": float(h * h)}


class DeviceTimer:
    """Device time per call on a GPU: the stream is held by ``torch.cuda._sleep`` while the
    host enqueues the timed calls, so the CUDA events around them measure the kernels
    alone, not the host's time to launch them. That is what such a kernel costs inside a
    step whose host runs ahead of the GPU (the training steps measured here: a GPU busy
    for nearly the whole step), where back-to-back timing of a small kernel measures the
    host instead. On a CPU, and wherever the hold is too short (the host took longer to
    enqueue than estimated), it is ``Timer.time``."""

    def __init__(self, timer: Timer | DeviceTimer) -> None:
        self.timer: Timer = timer.timer if isinstance(timer, DeviceTimer) else timer
        self._flush: Any = None

    def cold(self, fn: Callable[[], object]) -> tuple[float, int]:
        """Device time per call with the GPU's L2 cache flushed before each call (a write
        of twice its size between calls, whose own time is measured alone and taken
        off): the time of a kernel whose operands were last touched long before, as an
        optimizer's parameters, gradients and moments are at the end of a step. Timed
        back to back, an operand that fits in L2 stays there, and an Adam update of 0.6 M
        float32 elements measured half the time it took in a replayed ConvNeXt step. On a
        CPU, ``time``."""
        t = self.timer
        if not t.cuda:
            return t.time(fn)
        if self._flush is None:
            props = t.torch.cuda.get_device_properties(t.device)
            size = 2 * max(int(getattr(props, "L2_cache_size", 0) or 0), 64 << 20)
            self._flush = t.torch.empty(size, dtype=t.torch.uint8, device=t.device)
        flush = self._flush.zero_
        both, reps = self.time(lambda: (flush(), fn()))
        alone, _ = self.time(flush)
        return max(both - alone, 1e-7), reps

    def after_writer(self, fn: Callable[[], object], x: Any) -> tuple[float, int]:
        """Device time per call of ``fn`` with its input ``x`` written again just before
        each call (an elementwise copy, whose own time is measured alone and taken off),
        as a step runs a bias gradient's column sum right after the op that wrote its
        ``dy``: PyTorch's column sum of a few hundred rows runs a handful of blocks whose
        threads each loop over the rows, and took 12.1 us alone, 14.4 right after its
        input was written (796 rows of 768, float32, an H200: ``grid_search/results/
        strided_reduce/``). On a CPU, ``time``."""
        t = self.timer
        if not t.cuda:
            return t.time(fn)
        src = x.clone()
        both, reps = self.time(lambda: (x.copy_(src), fn()))
        alone, _ = self.time(lambda: x.copy_(src))
        return max(both - alone, 1e-7), reps

    def replayed(self, fn: Callable[[], object]) -> tuple[float, int]:
        """Device time per call of ``fn`` captured once as a CUDA graph and replayed, as a
        step run with ``--cuda-graph`` runs its kernels: no host in between, however long
        the host takes to issue them (a sequence of small kernels timed on a held stream
        fills the launch queue, and the hold runs out). On a CPU, ``time``."""
        import statistics

        t = self.timer
        if not t.cuda:
            return t.time(fn)
        torch = t.torch
        side = torch.cuda.Stream(device=t.device)
        side.wait_stream(torch.cuda.current_stream(t.device))
        with torch.cuda.stream(side):
            for _ in range(3):
                fn()
        torch.cuda.current_stream(t.device).wait_stream(side)
        t.sync()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()

        def replays(n: int) -> float:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(n):
                graph.replay()
            end.record()
            end.synchronize()
            return float(start.elapsed_time(end)) / 1e3 / n

        replays(2)
        once = max(replays(1), 1e-7)
        reps = int(min(t.max_reps, max(2, t.target_s / once)))
        return statistics.median(replays(reps) for _ in range(t.trials)), reps

    def time(self, fn: Callable[[], object]) -> tuple[float, int]:
        import statistics
        import time as _time

        t = self.timer
        if not t.cuda:
            return t.time(fn)
        torch = t.torch
        for _ in range(3):
            fn()
        t.sync()
        once = max(statistics.median(t._run(fn, 1) for _ in range(3)), 1e-7)
        reps = int(min(t.max_reps, max(2, t.target_s / once)))
        t0 = _time.perf_counter()
        for _ in range(reps):
            fn()
        host = _time.perf_counter() - t0  # enqueue time of reps calls (device may lag)
        t.sync()
        samples = []
        for _ in range(t.trials):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(int(3e9 * (2.0 * host + 1e-3)))  # > 2x the enqueue time
            start.record()
            h0 = _time.perf_counter()
            for _ in range(reps):
                fn()
            end.record()
            enqueued = _time.perf_counter() - h0
            end.synchronize()
            if enqueued > 2.0 * host + 1e-3:  # the hold ran out: not device time alone
                return t.time(fn)
            samples.append(start.elapsed_time(end) / 1e3 / reps)
        return statistics.median(samples), reps


def conv_geometry(op: str) -> dict[str, int]:
    """The geometry a convolution row's ``op`` names (``conv k3 s2 n64 c256 p196``, ``... g96``
    for grouped ones): ``k`` kernel size (elements), ``s`` stride, ``n`` batch, ``c`` input
    channels per group, ``p`` output pixels per image, ``g`` groups; only ``k`` (the
    kernel's side, squared here) and ``s`` in the first format."""
    g = {part[0]: int(part[1:]) for part in op.split()[1:]}
    if "n" not in g:  # the first format named the kernel's side
        g["k"] = g["k"] ** 2
    return g


def conv_shapes(quick: bool, cuda: bool, count: int, seed: int = 0,
                ) -> list[tuple[int, ...]]:
    """``(N, C, M, H, kernel, stride)`` of 2-D convolutions (``padding = kernel // 2``), drawn
    from the layers of CNNs: channels powers of two from 16 to 2048 (3 for a 7 x 7 stem),
    images 7 to 224 pixels, kernels 1, 3, 7, strides 1, 2; at most 0.4 TFLOP and 1 GiB a
    tensor (float32) on a GPU, far smaller on a CPU; then ``count // 4`` more of the patch
    embeddings of vision transformers (``patch_conv_shapes``)."""
    return _cnn_conv_shapes(quick, cuda, count, seed) + \
        patch_conv_shapes(quick, cuda, count // 4, seed)


def patch_conv_shapes(quick: bool, cuda: bool, count: int, seed: int = 0,
                      ) -> list[tuple[int, ...]]:
    """``(N, C, M, H, kernel, stride, 1, padding)`` of the patch embeddings of vision
    transformers: non-overlapping patches (``kernel = stride`` of 2, 4, 8, 14 or 16, no
    padding, images a whole number of patches: ViT's, and PVT's and SegFormer's reductions
    of the keys) and overlapping ones
    (7 x 7 of stride 4, padding 3: their stems), 3 to 1024 channels, images 14 to 224
    pixels; the same limits as ``conv_shapes``."""
    rng = random.Random(seed + 101)
    chans = [3, 16, 32, 64, 96, 128, 160, 256, 320, 512, 768, 1024]
    sizes = [14, 28, 56, 112, 224]
    batches, max_flops = _draw_limits(quick, cuda)

    def draw() -> tuple[int, ...] | None:
        if rng.random() < 0.25:
            k, s, p = 7, 4, 3
        else:
            k = s = rng.choice([2, 4, 4, 8, 8, 14, 16, 16])
            p = 0
        c, m = rng.choice(chans), rng.choice(chans[1:])
        h, n = rng.choice(sizes), rng.choice(batches)
        if quick:
            c, m, h = min(c, 16), min(m, 16), min(h, 28)
        oh = (h + 2 * p - k) // s + 1
        flops = 2.0 * n * oh * oh * m * c * k * k
        biggest = 4 * max(n * c * h * h, n * m * oh * oh)
        if oh < 1 or (p == 0 and h % k) or flops > max_flops or biggest > MAX_TENSOR_BYTES:
            return None
        return (n, c, m, h, k, s, 1, p)

    return _sample(count, draw)


def _draw_limits(quick: bool, cuda: bool) -> tuple[list[int], float]:
    """The batches a convolution sample draws from, and its FLOP limit."""
    batches = [2, 4] if quick else ([8, 16, 32, 64, 128, 256] if cuda else [1, 2, 4])
    return batches, (4e11 if cuda else (2e8 if quick else 2e9))


def _sample(count: int, draw: Callable[[], tuple[int, ...] | None]) -> list[tuple[int, ...]]:
    """``count`` distinct shapes from ``draw`` (``None``: a draw refused), giving up after
    100 draws per shape."""
    out: list[tuple[int, ...]] = []
    seen = set()
    for _ in range(100 * count):
        if len(out) >= count:
            break
        key = draw()
        if key is None or key in seen:
            continue
        seen.add(key)
        out.append(key)
    return out


def _cnn_conv_shapes(quick: bool, cuda: bool, count: int, seed: int,
                     ) -> list[tuple[int, ...]]:
    """``conv_shapes``' draws from the layers of CNNs."""
    rng = random.Random(seed)
    chans = [16, 32, 64, 128, 256, 512, 1024, 2048]
    sizes = [7, 14, 28, 56, 112, 224]
    batches, max_flops = _draw_limits(quick, cuda)

    def draw() -> tuple[int, ...] | None:
        k = rng.choice([1, 1, 3, 3, 3, 7])
        s = rng.choice([1, 1, 1, 2])
        c = 3 if k == 7 and rng.random() < 0.5 else rng.choice(chans)
        m = rng.choice(chans)
        h = rng.choice(sizes)
        n = rng.choice(batches)
        if quick:
            c, m, h = min(c, 32), min(m, 32), min(h, 14)
        oh = (h + 2 * (k // 2) - k) // s + 1
        flops = 2.0 * n * oh * oh * m * c * k * k
        biggest = 4 * max(n * c * h * h, n * m * oh * oh)
        if oh < 1 or flops > max_flops or biggest > MAX_TENSOR_BYTES:
            return None
        return (n, c, m, h, k, s)

    return _sample(count, draw)


def conv1d_shapes(quick: bool, cuda: bool, count: int, seed: int = 0,
                  ) -> list[tuple[int, ...]]:
    """``(N, C, M, L, kernel, stride, groups, padding)`` of 1-D convolutions, drawn from the
    layers of speech models: wav2vec 2.0-style feature extractors (512 channels from the
    raw signal: kernel 10 stride 5, then kernels 3 and 2 of stride 2, kernel 1 between
    them as SEW-D's), positional convolutions (768 or 1024 channels in 16 groups, kernel
    128, stride 1 or 2, padding 64), Whisper's stem (80 or 128 mel bins to 384-1280,
    kernel 3, stride 1 or 2, padding 1) and depthwise convolutions of conformers (256-1024
    channels, kernel 15 or 31); batches 1 to 64, lengths as 1 to 30 s of audio make them;
    at most 1 GiB a tensor (float32) on a GPU, far smaller on a CPU. Then ``count // 3``
    more (``pointwise_conv1d_shapes``): a text model's projections as convolutions of
    kernel 1 over its tokens."""
    return _speech_conv1d_shapes(quick, cuda, count, seed) + \
        pointwise_conv1d_shapes(quick, cuda, count // 3, seed)


def pointwise_conv1d_shapes(quick: bool, cuda: bool, count: int, seed: int = 0,
                            ) -> list[tuple[int, ...]]:
    """``(N, C, M, L, 1, 1, groups, 0)``: a transformer's projections written as 1-D
    convolutions of kernel 1 over its tokens (SqueezeBERT's and ConvBERT's, dense or in 2
    to 8 groups; widths 128 to 4096, the feed-forward's 4x expansions and contractions
    among them), sequences of 64 to 1,024 tokens, batches 1 to 64. cuDNN picks kernels for
    these by shape, far from their FLOPs: on an H200, 768 to 3,072 channels in 4 groups
    over 16 x 512 tokens took 1.6 ms forward and 0.15 ms for its input gradient, the
    contraction back 0.12 ms (``grid_search/results/adam_step/``, call H)."""
    rng = random.Random(seed + 13)
    batches = [1, 2, 4, 8, 12, 16, 24, 32, 48, 64] if not quick else [1, 2]
    widths = [128, 256, 384, 512, 768, 1024, 2048]

    def draw() -> tuple[int, ...] | None:
        h = rng.choice(widths)
        c, m = rng.choice([(h, h), (h, h), (h, 4 * h), (4 * h, h), (h, 3 * h)])
        g = rng.choice([1, 1, 2, 4, 4, 8])
        n = rng.choice(batches)
        length = rng.choice([64, 128, 256, 384, 512, 512, 1024])
        if quick:
            c, m, g, length = min(c, 16), min(m, 16), min(g, 2), min(length, 64)
        if c % g or m % g:
            return None
        biggest = 4 * n * max(c, m) * length
        if biggest > (MAX_TENSOR_BYTES if cuda else 1 << 24):
            return None
        return (n, c, m, length, 1, 1, g, 0)

    return _sample(count, draw)


def _speech_conv1d_shapes(quick: bool, cuda: bool, count: int, seed: int,
                          ) -> list[tuple[int, ...]]:
    """``conv1d_shapes``' draws from speech models' layers."""
    rng = random.Random(seed + 11)
    batches = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64] if not quick else [1, 2]

    def draw() -> tuple[int, ...] | None:
        kind = rng.random()
        n = rng.choice(batches)
        if kind < 0.3:  # a feature extractor's layer
            c, m = rng.choice([(1, 512), (512, 512), (512, 512), (1, 256), (256, 256)])
            k, st = rng.choice([(10, 5), (3, 2), (3, 2), (2, 2), (1, 1)])
            if c == 1:
                k, st = 10, 5
            length = rng.choice([16000, 32000, 64000, 160000]) // rng.choice([1, 5, 10, 20])
            p, g = 0, 1
        elif kind < 0.6:  # a positional convolution
            c = m = rng.choice([768, 1024])
            k, st, p, g = 128, rng.choice([1, 2]), 64, 16
            length = rng.choice([24, 49, 50, 99, 100, 149, 199, 249, 399, 499, 749, 1499])
        elif kind < 0.8:  # Whisper's stem
            c, m = rng.choice([(80, 384), (80, 768), (128, 1280), (384, 384), (768, 768)])
            k, st, p, g = 3, rng.choice([1, 2]), 1, 1
            length = rng.choice([500, 1000, 1500, 3000])
        else:  # a conformer's depthwise convolution
            c = m = g = rng.choice([256, 512, 1024])
            k = rng.choice([15, 31])
            st, p = 1, k // 2
            length = rng.choice([50, 100, 250, 500, 1000])
        if quick:
            c, m, g = min(c, 8), min(m, 8), min(g, 8) if g == c else (1 if g == 1 else 2)
            if c % g or m % g:
                g = 1
            length = min(length, 256)
        out = (length + 2 * p - k) // st + 1
        biggest = 4 * max(n * c * length, n * m * out)
        if out < 1 or biggest > (MAX_TENSOR_BYTES if cuda else 1 << 24):
            return None
        return (n, c, m, length, k, st, g, p)

    return _sample(count, draw)


def grouped_conv_shapes(quick: bool, cuda: bool, count: int, seed: int = 0,
                        ) -> list[tuple[int, ...]]:
    """``(N, C, M, H, kernel, stride, groups)`` of grouped 2-D convolutions (``padding =
    kernel // 2``): half depthwise (``groups = C = M``: MobileNet's and EfficientNet's 3 x 3
    and 5 x 5, channels 16 to 1152 as their expansions make them), the others grouped as
    ResNeXt's and RegNet's (4 to 128 channels per group, 2 to 64 groups); kernels 3, 5, 7,
    strides 1, 2, images 7 to 112 pixels; at most 1 GiB a tensor (float32) on a GPU, far
    smaller on a CPU. (A sample with two in three depthwise held 7 shapes of RegNet's 3 x 3
    of 64 channels per group in 480, and priced RegNet's at up to 4.8x their time.)"""
    rng = random.Random(seed + 7)
    dw_chans = [16, 24, 32, 48, 64, 96, 144, 192, 240, 288, 384, 480, 576, 672, 768, 960,
                1152]
    sizes = [7, 14, 28, 56, 112]
    batches, _ = _draw_limits(quick, cuda)

    def draw() -> tuple[int, ...] | None:
        k = rng.choice([3, 3, 5, 5, 7])
        s = rng.choice([1, 1, 1, 2])
        h = rng.choice(sizes)
        n = rng.choice(batches)
        if rng.random() < 1 / 2:
            c = m = g = rng.choice(dw_chans)
        else:
            g = rng.choice([2, 4, 8, 16, 32, 64])
            per = rng.choice([4, 8, 16, 32, 64, 64, 128])
            c = m = g * per
        if quick:  # small: 16 depthwise channels at most, else 2 groups of 4
            if c == g:
                g = c = m = min(g, 16)
            else:
                g, c, m = 2, 8, 8
            h = min(h, 14)
        oh = (h + 2 * (k // 2) - k) // s + 1
        biggest = 4 * max(n * c * h * h, n * m * oh * oh)
        if oh < 1 or biggest > (MAX_TENSOR_BYTES if cuda else 1 << 26):
            return None
        return (n, c, m, h, k, s, g)

    return _sample(count, draw)


def _compile(fn: Any, device: Any) -> Callable[..., Any]:
    """The kernel of a function's last op, compiled by the backend's lowering; the ops
    before it are ``Constant`` ops, whose values are appended to its arguments (the
    parameters come first)."""
    from distir.analysis.projection import project
    from distir.backend.lowering import compile_program

    prog = compile_program(project(fn).programs[0], device)
    consts = tuple(step.kernel()[0] for step in prog.steps[:-1])
    kernel = prog.steps[-1].kernel
    if not consts:
        return kernel  # type: ignore[no-any-return]
    return lambda *args: kernel(*args, *consts)


def _nbytes(fn: Any) -> int:
    """Bytes of every input and result of a one-op function (types inferred)."""
    from distir.analysis.api import type_env
    from distir.analysis.cost import tensor_bytes
    from distir.analysis.values import type_of

    env = type_env(fn)
    op = fn.ops[-1]
    return int(tensor_bytes(tuple(type_of(env[v]) for v in (*op.inputs, *op.outputs)
                                  if v is not None)))


def _one_op(op_type: str, params: list[tuple[str, Any, tuple[int, ...]]], n_out: int,
            keep: int | None = None, **attrs: Any) -> Any:
    """A function of one op; it returns every result, or only result ``keep``."""
    from distir.ir import FunctionBuilder, TensorType

    b = FunctionBuilder(op_type.lower())
    ins = [b.param(name, TensorType(dt, shape, 0)) for name, dt, shape in params]
    outs = b.op(op_type, *ins, num_results=n_out, **attrs)
    res = outs if isinstance(outs, tuple) else (outs,)
    return b.ret(*(res if keep is None else res[keep:keep + 1]))


def _case(fam: str, width: Any, n: int, dtype: Any,
          cpu: bool = False) -> tuple[Any, dict[str, int]] | None:
    """The one-op function of a family at ``n`` elements of its main tensor (``None`` when
    the width does not fit), and the exclusive upper bounds of its integer inputs. The
    embedding gradient's table has 32,768 rows, 2,048 on a ``cpu`` (the lowering copies
    the table each call)."""
    from distir.ir import DType

    i64 = DType.Int64
    if fam in ("batchnorm", "batchnorm_grad"):
        c, h = width
        if c * h * h > n:
            return None
        x = (n // (c * h * h), c, h, h)
        if fam == "batchnorm":
            ch = [(nm, dtype, (c,)) for nm in ("w", "b", "m", "v")]
            # Y only: a training step reads no running statistics (they are not computed)
            return _one_op("BatchNormalization", [("x", dtype, x), *ch], 3, keep=0,
                           training_mode=1), {}
        return _one_op("BatchNormGrad", [("x", dtype, x), ("w", dtype, (c,)),
                                         ("dy", dtype, x)], 3), {}
    if fam == "groupnorm":  # (channels, groups, side): statistics per sample and group
        c, g, h = width
        if c * h * h > n:
            return None
        x = (n // (c * h * h), c, h, h)
        return _one_op("GroupNormalization", [("x", dtype, x), ("w", dtype, (c,)),
                                              ("b", dtype, (c,))], 1, num_groups=g,
                       epsilon=1e-5), {}  # statistics in float32, as exporters write it
    if fam in ("avgpool", "avgpool_grad"):  # 3 x 3 windows of stride 1 or 2, pads of 1
        c, st = width
        h = next((h for h in (56, 28, 14, 7) if c * h * h <= n), 0)
        if not h:
            return None
        x = (max(n // (c * h * h), 1), c, h, h)
        win = dict(kernel_shape=[3, 3], strides=[st, st], pads=[1, 1, 1, 1],
                   count_include_pad=0)
        oh = (h + 2 - 3) // st + 1
        if fam == "avgpool":
            return _one_op("AveragePool", [("x", dtype, x)], 1, **win), {}
        return _one_op("AveragePoolGrad", [("x", dtype, x), ("dy", dtype, (x[0], c, oh, oh))],
                       1, **win), {}
    if fam in ("maxpool", "maxpool_grad"):
        c = width
        h = next((h for h in (56, 28, 14, 7) if c * h * h <= n), 0)
        if not h:
            return None
        x = (max(n // (c * h * h), 1), c, h, h)
        win = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
        oh = (h + 2 - 3) // 2 + 1
        dy = (x[0], c, oh, oh)
        if fam == "maxpool":
            return _one_op("MaxPool", [("x", dtype, x)], 1, **win), {}
        return _one_op("MaxPoolGrad", [("x", dtype, x), ("dy", dtype, dy)], 1,
                       dilations=[1, 1], **win), {}
    if fam == "adam":
        return _one_op("AdamOptimizer", [("w", dtype, (n,)), ("dw", dtype, (n,)),
                                         ("m", dtype, (n,)), ("v", dtype, (n,)),
                                         ("step", DType.Float32, ())], 3,
                       lr=1e-4), {}
    if fam == "reduce":
        from distir.ir import FunctionBuilder, TensorType

        if isinstance(width, tuple) and len(width) == 3:  # [N, heads, tokens, head width]
            heads, tokens, d = width
            rows = n // (heads * tokens * d)
            shape, axes = (rows, heads, tokens, d), [0, 2]
        else:
            c, inner = width if isinstance(width, tuple) else (width, 1)
            rows = n // (c * inner)
            shape, axes = ((rows, c, inner), [0, 2]) if inner > 1 else ((rows, c), [0])
        if rows < 1:
            return None
        b = FunctionBuilder("reduce")
        x = b.param("x", TensorType(dtype, shape, 0))
        ax = b.op("Constant", value=__import__("numpy").array(axes, dtype="int64"))
        return b.ret(b.op("ReduceSum", x, ax, keepdims=0)), {}
    if fam == "concat":  # parts [rows, length, inner] along axis 1
        lengths, inner = width[:2]
        rows = n // (sum(lengths) * inner)
        if rows < (8 if len(width) > 3 else 1):
            return None
        lead = (rows // 8, 8) if len(width) > 3 else (rows,)  # rank 4: the rows in two axes
        return _one_op("Concat", [(f"x{i}", dtype, (*lead, d, inner))
                                  for i, d in enumerate(lengths)], 1, axis=len(lead)), {}
    if fam == "where":  # a ReLU6's gradient: the mask's elements kept, else zero
        from distir.ir import FunctionBuilder, TensorType

        b = FunctionBuilder("where")
        cond = b.param("cond", TensorType(DType.Bool, (n,), 0))
        x = b.param("x", TensorType(dtype, (n,), 0))
        zero = b.op("Constant", value=__import__("numpy").zeros((), dtype=dtype.np))
        return b.ret(b.op("Where", cond, x, zero)), {}
    if fam == "pad":  # one pixel around each image, as a same-padded convolution's input
        from distir.ir import FunctionBuilder, TensorType

        c, side = width
        if c * side * side > n:
            return None
        b = FunctionBuilder("pad")
        x = b.param("x", TensorType(dtype, (n // (c * side * side), c, side, side), 0))
        pads = b.op("Constant", value=__import__("numpy").array([0, 0, 1, 1, 0, 0, 1, 1],
                                                                dtype="int64"))
        return b.ret(b.op("Pad", x, pads)), {}
    if fam in ("gather_elements", "scatter_elements"):  # n: the index's elements
        w_in, w_out, bc = width
        rows = n // (bc * w_out)
        if rows < 1:
            return None
        data, idx = (bc, rows, w_in), (bc, rows, w_out)
        if fam == "gather_elements":
            return _one_op("GatherElements", [("data", dtype, data), ("idx", i64, idx)], 1,
                           axis=-1), {"idx": w_in}
        return _one_op("ScatterElements", [("data", dtype, data), ("idx", i64, idx),
                                           ("upd", dtype, idx)], 1, axis=-1,
                       reduction="add"), {"idx": w_in}
    rows = n // width
    if rows < 1:
        return None
    if fam == "layernorm_grad":
        return _one_op("LayerNormGrad", [("x", dtype, (rows, width)), ("w", dtype, (width,)),
                                         ("dy", dtype, (rows, width))], 3, axis=-1,
                       epsilon=1e-5), {}
    if fam == "softmax_grad":
        return _one_op("SoftmaxGrad", [("y", dtype, (rows, width)),
                                       ("dy", dtype, (rows, width))], 1, axis=-1), {}
    if fam in ("cross_entropy", "cross_entropy_grad"):
        op = "SoftmaxCrossEntropyLoss" + ("Grad" if fam.endswith("grad") else "")
        return _one_op(op, [("x", dtype, (rows, width)), ("t", i64, (rows,))], 1,
                       reduction="sum"), {"t": width}
    if fam == "scatter_add":  # (on a CPU, copying a GPU's table took 0.1-0.2 s a call)
        table = 32768 if not cpu else 2048
        if table * width * 4 > MAX_TENSOR_BYTES:
            return None
        return _one_op("ScatterND", [("data", dtype, (table, width)),
                                     ("idx", i64, (rows, 1)), ("upd", dtype, (rows, width))],
                       1, reduction="add"), {"idx": table}
    if fam == "scatter_add_few":  # one row of n / table elements added into the table
        row = n // width
        if row < 1:
            return None
        return _one_op("ScatterND", [("data", dtype, (width, row)), ("idx", i64, (1, 1)),
                                     ("upd", dtype, (1, row))], 1, reduction="add"), \
            {"idx": width}
    raise ValueError(f"unknown family {fam}")


def _inputs(fn: Any, bounds: dict[str, int], device: Any) -> list[Any]:
    import torch

    from distir.backend.lowering import torch_dtype
    from distir.ir import DType

    out = []
    for p in fn.params:
        t = p.type
        if t.dtype.is_float:
            x = torch.randn(t.shape, device=device, dtype=torch_dtype(t.dtype))
            if p.name == "step":  # Adam's step count: a training step's (state_roles)
                out.append(torch.ones_like(x))
            else:
                out.append(x.abs() + 0.1 if p.name == "v" else x)
        elif t.dtype == DType.Bool:
            out.append(torch.rand(t.shape, device=device) < 0.5)
        else:
            out.append(torch.randint(0, bounds.get(p.name, 2), t.shape, device=device))
    return out


DENSE_FAMILIES = ("reduce",)
"""Families measured at quarter octaves (``quarter_sizes``): PyTorch's column reduction
(a bias gradient, ``[rows, width]`` summed over rows) splits the rows among blocks only
from about 1,024 of them, so that 683 rows of 768 took 11.4 us on an H200 and 1,024 rows
7.9 us; in the Conformer's steps of 4 clips (796 rows) 17 us, priced 8.5 between the
ladder's points (``grid_search/results/conv1d_tokens/``, call E)."""


def quarter_sizes(sizes: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """``sizes`` (a ``bench.size_ladder``) with 1.25 and 1.75 x each power of two below
    the largest added as training sizes (rounded to a multiple of 8)."""
    out = list(sizes)
    powers = sorted(n for n, split in sizes if n & (n - 1) == 0)
    for p in powers[:-1]:
        out += [(int(p * f) // 8 * 8, "train") for f in (1.25, 1.75)]
    return sorted(set(out))


def bench_train_kernels(device: Any, dtypes: list[str], sizes: list[tuple[int, str]],
                        timer: Timer, log: Callable[[str], None],
                        families: tuple[str, ...] = TRAIN_FAMILIES) -> Iterator[Row]:
    """Time every memory-bound training family over ``(element count, split)`` sizes, each
    width of the family and each dtype, through the backend's lowerings."""
    import torch

    from distir.ir import DType

    dtimer = DeviceTimer(timer)
    for fam in families:
        count = 0
        for dt in dtypes:
            ddt = DType[dt]
            for n, split in (quarter_sizes(sizes) if fam in DENSE_FAMILIES else sizes):
                if n * ddt.itemsize * (8 if fam == "adam" else 1) > MAX_TENSOR_BYTES:
                    continue
                widths: tuple[Any, ...] = (_CNN if fam in ("batchnorm", "batchnorm_grad")
                                           else _WIDTHS[fam])
                for width in widths:
                    case = _case(fam, width, n, ddt, cpu=str(device).startswith("cpu"))
                    if case is None:
                        continue
                    fn, bounds = case
                    kernel = _compile(fn, device)
                    args = _inputs(fn, bounds, device)
                    if fam in ("gather_elements", "scatter_elements") and width[2] > 1:
                        args[1] = args[1][:1].expand(args[1].shape)  # a broadcast index
                    if fam == "concat" and len(width) > 2 and width[2]:  # a zero part
                        args[0] = torch.zeros((), dtype=args[0].dtype,
                                              device=args[0].device).expand(args[0].shape)
                    with torch.inference_mode():
                        if fam in SEQUENCE:
                            secs, reps = _in_sequence(dtimer, kernel, args, fn, bounds,
                                                      device)
                        elif fam in AFTER_WRITER:
                            secs, reps = dtimer.after_writer(
                                lambda k=kernel, a=args: k(*a), args[0])
                        else:
                            timed = dtimer.cold if fam in COLD else dtimer.time
                            secs, reps = timed(lambda k=kernel, a=args: k(*a))
                    op = fn.ops[-1].op_type
                    nbytes = _nbytes(fn)
                    if fam in ("gather_elements", "scatter_elements"):
                        # a broadcast index's bytes are its distinct elements' (as the
                        # cost rule counts them: compute.index_op_time)
                        m = fn.params[1].type.numel
                        nbytes -= (m - m // width[2]) * 8
                        op, width = f"{op} i{width[2]}", width[0]  # broadcast, data axis
                    elif fam == "pad":  # the row is the padded image's side
                        op, width = f"{op} c{width[0]}", width[1]
                    elif fam == "groupnorm":  # a group's elements, a channel's pixels
                        c, g, h = width
                        op, width = f"{op} i{h * h}", c // g * h * h
                    elif fam == "concat":  # the parts, the elements after the axis
                        aligned = all(d * width[1] * ddt.itemsize % 16 == 0 for d in width[0])
                        op = f"{op} p{len(width[0])} i{width[1]} a{int(aligned)}" + \
                            (" s1" if len(width) > 2 and width[2] else "") + \
                            (" r4" if len(width) > 3 else "")
                        width = sum(width[0])
                    elif fam == "reduce" and isinstance(width, tuple) and len(width) == 3:
                        op, width = f"{op} run{width[2]} mid{width[1]}", width[0] * width[2]
                    elif isinstance(width, tuple):  # (channels, pixels, size or stride)
                        tag = "i" if fam in ("reduce", "avgpool", "avgpool_grad") else "h"
                        op, width = f"{op} {tag}{width[1]}", width[0]
                    yield Row(fam, op, dt, secs, n, width, bytes=nbytes,
                              flops=float(n), reps=reps, device=str(device), split=split)
                    count += 1
                    del args, kernel
        log(f"{fam}: {count} measurements")


def bench_convs(device: Any, dtypes: list[str],
                shapes: Sequence[tuple[int, ...]], timer: Timer,
                log: Callable[[str], None], channels_last: bool = False,
                one_d: bool = False) -> Iterator[Row]:
    """Time ``Conv`` and both halves of ``ConvGrad`` for every shape and dtype through the
    backend's lowerings; rows carry the forward's implicit-GEMM ``m``, ``n``, ``k`` (``k``
    per group). A shape's seventh number is its groups (``grouped_conv_shapes``; more than
    one: ``GROUPED_CONV_FAMILIES``), its eighth its padding (``patch_conv_shapes``; else
    ``kernel // 2``). With ``channels_last``, ``x`` and ``dy`` are handed over in
    the channels-last memory format (``NHWC_CONV_FAMILIES``, ``NHWC_GROUPED_CONV_FAMILIES``).
    With ``one_d``, the shapes are 1-D (``conv1d_shapes``: the fourth number the input's
    length), the rows of ``CONV1D_FAMILIES`` (a row's ``k`` kernel elements and ``p``
    output positions are then the kernel's length and the output's)."""
    import torch

    from distir.ir import DType

    dtimer = DeviceTimer(timer)
    for dt in dtypes:
        ddt = DType[dt]
        size = ddt.itemsize
        for i, shape in enumerate(shapes):
            n, c, m, h, k, s = shape[:6]
            g = shape[6] if len(shape) > 6 else 1
            p = shape[7] if len(shape) > 7 else k // 2
            oh = (h + 2 * p - k) // s + 1
            cg = c // g
            sp = 1 if one_d else 2  # spatial axes
            win, pix = k ** sp, oh ** sp
            gm, gn, gk = n * pix, m, cg * win
            geo = dict(strides=[s] * sp, pads=[p] * (2 * sp), dilations=[1] * sp, group=g)
            x, w, dy = (n, c) + (h,) * sp, (m, cg) + (k,) * sp, (n, m) + (oh,) * sp
            split = _split(i)
            for role in ("conv", "dgrad", "wgrad"):
                if role == "conv":
                    fn = _one_op("Conv", [("x", ddt, x), ("w", ddt, w)], 1,
                                 kernel_shape=[k] * sp, **geo)
                else:
                    # only the half measured is returned: the other result is dead
                    fn = _one_op("ConvGrad", [("x", ddt, x), ("w", ddt, w), ("dy", ddt, dy)],
                                 2, keep=0 if role == "dgrad" else 1, **geo)
                kernel = _compile(fn, device)
                args = _inputs(fn, {}, device)
                if channels_last:  # x and dy (never the weight, the second argument)
                    args = [a.contiguous(memory_format=torch.channels_last)
                            if j != 1 and a.dim() == 4 else a for j, a in enumerate(args)]
                with torch.inference_mode():
                    secs, reps = dtimer.time(lambda kk=kernel, a=args: kk(*a))
                nbytes = (n * c * h ** sp + m * cg * win + n * m * pix) * size
                tag = f" g{g}" if g > 1 else ""
                fam = ("conv1d" if role == "conv" else f"conv1d_{role}") if one_d else \
                    conv_family(role, g > 1, channels_last)
                yield Row(fam, f"conv k{win} s{s} n{n} c{cg} p{pix}{tag}", dt, secs, gm,
                          gn, gk, nbytes, 2.0 * gm * gn * gk, reps=reps, device=str(device),
                          split=split)
                del args, kernel
        kind = "1-D conv" if one_d else \
            "grouped conv" if any(len(sh) > 6 and sh[6] > 1 for sh in shapes) else "conv"
        kind += " (channels-last)" if channels_last else ""
        log(f"{kind} {dt}: {len(shapes)} shapes x 3")
