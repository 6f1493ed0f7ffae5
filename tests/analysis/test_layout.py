"""Memory formats (``distir.analysis.layout``): strides through views as PyTorch computes
them, and convolutions handed a channels-last view priced by the profile's ``_nhwc`` fits
where it has them, on a tiny made-up profile."""

from __future__ import annotations

import itertools
import random

import pytest
import torch

import distir
from distir.analysis.hardware import FitModel, Hardware, LinkSpec
from distir.analysis.layout import contiguous_strides, is_channels_last, view_strides
from distir.analysis.simulator import simulate


def test_view_strides_agree_with_torch() -> None:
    rng = random.Random(0)
    checked = viewed = 0
    for _ in range(400):
        rank = rng.randint(1, 4)
        shape = tuple(rng.choice([1, 2, 3, 4, 6]) for _ in range(rank))
        perm = list(range(rank))
        rng.shuffle(perm)
        t = torch.empty(shape).permute(perm)
        numel = t.numel()
        # a new shape of the same size: the dims' factors regrouped at random
        factors = [p for d in t.shape for p in _factors(d)]
        rng.shuffle(factors)
        cut = sorted(rng.sample(range(1, len(factors)), rng.randint(0, len(factors) - 1))) \
            if len(factors) > 1 else []
        new = tuple(_prod(factors[a:b]) for a, b in itertools.pairwise([0, *cut, len(factors)]))
        if rng.random() < 0.3:
            new = (*new, 1)
        assert _prod(new) == numel
        got = view_strides(tuple(t.shape), tuple(t.stride()), new)
        try:
            want = tuple(t.view(new).stride())
        except RuntimeError:
            assert got is None, (tuple(t.shape), tuple(t.stride()), new)
        else:
            viewed += 1
            assert got is not None
            # strides of axes of length 1 are arbitrary
            assert all(g == w for g, w, d in zip(got, want, new, strict=True) if d != 1)
        checked += 1
    assert viewed > 100 and checked - viewed > 50


def _factors(n: int) -> list[int]:
    out, d = [], 2
    while n > 1:
        while n % d == 0:
            out.append(d)
            n //= d
        d += 1
    return out or [1]


def _prod(xs: tuple[int, ...] | list[int]) -> int:
    p = 1
    for x in xs:
        p *= x
    return p


def test_channels_last_is_recognized() -> None:
    t = torch.empty(2, 16, 4, 5).contiguous(memory_format=torch.channels_last)
    assert is_channels_last(tuple(t.shape), tuple(t.stride()))
    assert not is_channels_last((2, 16, 4, 5), contiguous_strides((2, 16, 4, 5)))
    one = torch.empty(2, 1, 4, 5).contiguous(memory_format=torch.channels_last)
    assert not is_channels_last(tuple(one.shape), tuple(one.stride()))  # also contiguous
    # SegFormer's feed-forward: [B, H * W, C] transposed, then viewed as [B, C, H, W]
    v = torch.empty(2, 20, 16).transpose(1, 2).reshape(2, 16, 4, 5)
    assert is_channels_last(tuple(v.shape), tuple(v.stride()))


BASE = dict(name="t", memory_bytes=1 << 34, peak_flops=(("Float32", 1e12),),
            memory_bandwidth=1e11, launch_overhead=1e-6, devices_per_node=4,
            intra_node=(LinkSpec(2, 1e10, 1e-6),), inter_node=(LinkSpec(2, 1e9, 1e-5),))
NCHW = (("conv_grouped", "Float32", FitModel("linear", ("bytes",), intercept=2e-5,
                                              coef=(1e-10,))),
        ("conv_grouped_dgrad", "Float32", FitModel("linear", ("bytes",), intercept=3e-5,
                                                    coef=(1e-10,))),
        ("conv_grouped_wgrad", "Float32", FitModel("linear", ("bytes",), intercept=4e-5,
                                                    coef=(1e-10,))))
NHWC = (("conv_grouped_nhwc", "Float32", FitModel("linear", ("bytes",), intercept=5e-6,
                                                   coef=(1e-10,))),
        ("conv_grouped_nhwc_dgrad", "Float32", FitModel("linear", ("bytes",),
                                                         intercept=6e-6, coef=(1e-10,))),
        ("conv_grouped_nhwc_wgrad", "Float32", FitModel("linear", ("bytes",),
                                                         intercept=7e-6, coef=(1e-10,))))

# tokens [2, 64, C] transposed and reshaped to an image [2, C, 8, 8] (a view, channels
# last), a depthwise 3 x 3 of it and both gradients; the same convolution of a contiguous
# image; and of tokens whose rows are not aligned (C = 3: the transpose is copied)
TEXT = """
func @main(%t: Tensor[Float32, (2, 64, 32), 0], %img: Tensor[Float32, (2, 32, 8, 8), 0],
           %w: Tensor[Float32, (32, 1, 3, 3), 0], %dy: Tensor[Float32, (2, 32, 8, 8), 0],
           %u: Tensor[Float32, (2, 64, 3), 0], %w3: Tensor[Float32, (3, 1, 3, 3), 0]) {
  %tt = Transpose(%t, perm=[0, 2, 1])
  %s = Constant(value=dense<Int64>[2, 32, 8, 8], device=0)
  %x = Reshape(%tt, %s)
  %y = Conv(%x, %w, group=32, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
  %dx, %dw = ConvGrad(%x, %w, %dy, group=32, pads=[1, 1, 1, 1], strides=[1, 1],
                       dilations=[1, 1])
  %z = Conv(%img, %w, group=32, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
  %ut = Transpose(%u, perm=[0, 2, 1])
  %s3 = Constant(value=dense<Int64>[2, 3, 8, 8], device=0)
  %x3 = Reshape(%ut, %s3)
  %y3 = Conv(%x3, %w3, group=3, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
  return %y, %dx, %dw, %z, %y3
}"""


def _costs(hw: Hardware) -> dict[str, float]:
    sim = simulate(distir.parse(TEXT), hw)
    return {op.outputs[0].name: secs for _, secs, _, op, *_ in sim.events()}


def test_a_channels_last_view_takes_the_nhwc_fits() -> None:
    hw = Hardware(**BASE, fits=(*NCHW, *NHWC))
    got = _costs(hw)
    nbytes = (2 * 32 * 64 * 2 + 32 * 9) * 4  # x, y and w
    assert got["y"] == pytest.approx(5e-6 + 1e-10 * nbytes)
    # the contiguous dy is copied to channels-last first (no copy fit: memory-bound)
    dy_copy = hw.memory_time(2.0 * 2 * 32 * 64 * 4, 0.0, "Float32")
    assert got["dx"] == pytest.approx(6e-6 + 7e-6 + 2e-10 * nbytes + dy_copy)
    assert got["z"] == pytest.approx(2e-5 + 1e-10 * nbytes)  # contiguous: NCHW
    n3 = (2 * 3 * 64 * 2 + 3 * 9) * 4
    assert got["y3"] == pytest.approx(2e-5 + 1e-10 * n3)  # copied transpose: NCHW
    # without the _nhwc fits, every convolution takes the NCHW ones (and the same copies)
    old = _costs(Hardware(**BASE, fits=NCHW))
    assert old["y"] == pytest.approx(got["z"])
    assert old["dx"] == pytest.approx(3e-5 + 4e-5 + 2e-10 * nbytes + dy_copy)


# tokens [2, 64, 32] viewed as a channels-last image and convolved depthwise
TOKENS_CONV = """  %tt = Transpose(%t, perm=[0, 2, 1])
  %s = Constant(value=dense<Int64>[2, 32, 8, 8], device=0)
  %x = Reshape(%tt, %s)
  %y = Conv(%x, %w, group=32, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
"""

# a layer's forward returns the view it convolved (a saved activation), its backward
# receives it as a parameter: the strides cross both calls
CALLS = """
func @fwd(%t: Tensor[Float32, (2, 64, 32), 0], %w: Tensor[Float32, (32, 1, 3, 3), 0]) {
""" + TOKENS_CONV + """  return %y, %x
}

func @bwd(%x: Tensor[Float32, (2, 32, 8, 8), 0], %w: Tensor[Float32, (32, 1, 3, 3), 0],
          %dy: Tensor[Float32, (2, 32, 8, 8), 0]) {
  %dx, %dw = ConvGrad(%x, %w, %dy, group=32, pads=[1, 1, 1, 1], strides=[1, 1],
                       dilations=[1, 1])
  return %dx, %dw
}

func @main(%t: Tensor[Float32, (2, 64, 32), 0], %w: Tensor[Float32, (32, 1, 3, 3), 0],
           %dy: Tensor[Float32, (2, 32, 8, 8), 0]) {
  %y, %x = call @fwd(%t, %w)
  %dx, %dw = call @bwd(%x, %w, %dy)
  %y2, %x2 = call @fwd(%t, %w)
  %dx2, %dw2 = call @bwd(%x2, %w, %dy)
  return %y, %dx, %dw, %y2, %dx2, %dw2
}"""


def test_strides_cross_calls_as_if_inlined() -> None:
    from distir.ir.inline import inline_calls

    hw = Hardware(**BASE, fits=(*NCHW, *NHWC))
    fn = distir.parse(CALLS).entry
    kinds = ("Conv", "ConvGrad")

    def costs(f: object) -> list[tuple[str, float]]:
        sim = simulate(f, hw)  # type: ignore[arg-type]
        return sorted((op.op_type, secs) for _, secs, _, op, *_ in sim.events()
                      if op.op_type in kinds)

    got = costs(fn)
    nbytes = (2 * 32 * 64 * 2 + 32 * 9) * 4
    dy_copy = hw.memory_time(2.0 * 2 * 32 * 64 * 4, 0.0, "Float32")
    assert got == [("Conv", pytest.approx(5e-6 + 1e-10 * nbytes))] * 2 + \
        [("ConvGrad", pytest.approx(6e-6 + 7e-6 + 2e-10 * nbytes + dy_copy))] * 2
    assert got == costs(inline_calls(fn))
    assert simulate(fn, hw).latency_s == pytest.approx(simulate(inline_calls(fn), hw).latency_s)


# a class token split off the tokens (CvT): the image's view is channels-last in order but
# not dense, copied before the NHWC kernel; a channel split of an NCHW image: copied too
PARTS = """
func @main(%t: Tensor[Float32, (2, 65, 32), 0], %w: Tensor[Float32, (32, 1, 3, 3), 0],
           %img: Tensor[Float32, (2, 64, 8, 8), 0]) {
  %sizes = Constant(value=dense<Int64>[1, 64], device=0)
  %cls, %tok = Split(%t, %sizes, axis=1)
  %tt = Transpose(%tok, perm=[0, 2, 1])
  %s = Constant(value=dense<Int64>[2, 32, 8, 8], device=0)
  %x = Reshape(%tt, %s)
  %y = Conv(%x, %w, group=32, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
  %halves = Constant(value=dense<Int64>[32, 32], device=0)
  %a, %b = Split(%img, %halves, axis=1)
  %z = Conv(%b, %w, group=32, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
  return %y, %z
}"""


def test_views_not_dense_are_copied_first() -> None:
    hw = Hardware(**BASE, fits=(*NCHW, *NHWC))
    sim = simulate(distir.parse(PARTS), hw)
    got = {op.outputs[0].name: secs for _, secs, _, op, *_ in sim.events()}
    nbytes = (2 * 32 * 64 * 2 + 32 * 9) * 4
    x_copy = hw.memory_time(2.0 * 2 * 32 * 64 * 4, 0.0, "Float32")
    assert got["y"] == pytest.approx(5e-6 + 1e-10 * nbytes + x_copy)  # NHWC, copied
    assert got["z"] == pytest.approx(2e-5 + 1e-10 * nbytes + x_copy)  # NCHW, copied


def test_a_search_keeps_no_program_it_is_done_with() -> None:
    import gc
    import weakref

    from distir.analysis.simulator import Simulator

    # (as a search simulates: equal functions share their summaries across programs)
    sim = Simulator(Hardware(**BASE, fits=(*NCHW, *NHWC)), share_equal_functions=True)
    first = distir.parse(CALLS).entry
    ref = weakref.ref(first)
    a = sim.simulate_function(first).latency_s
    assert not sim._layout_tracker._fns  # the functions' facts are dropped after a program
    del first
    b = sim.simulate_function(distir.parse(CALLS).entry).latency_s
    assert a == pytest.approx(b)
    sim._recs.clear()  # (records are kept up to a bound, keyed by their ops)
    gc.collect()
    # the summaries keep their callees (and so their strides); the entry function goes
    assert ref() is None


# an index expanded over a leading axis (as exports expand relative positions over batch
# and heads), a gather and an adding scatter of it, inside a called function too; and the
# same ops with a dense index
INDEXED = """
func @layer(%x: Tensor[Float32, (8, 16, 32), 0], %ie: Tensor[Int64, (8, 16, 32), 0],
            %u: Tensor[Float32, (8, 16, 32), 0]) {
  %g2 = GatherElements(%x, %ie, axis=-1)
  return %g2
}

func @main(%x: Tensor[Float32, (8, 16, 32), 0], %i: Tensor[Int64, (1, 16, 32), 0],
           %d: Tensor[Int64, (8, 16, 32), 0], %u: Tensor[Float32, (8, 16, 32), 0]) {
  %shape = Constant(value=dense<Int64>[8, 16, 32], device=0)
  %ie = Expand(%i, %shape)
  %g = GatherElements(%x, %ie, axis=-1)
  %s = ScatterElements(%x, %ie, %u, axis=-1, reduction="add")
  %gd = GatherElements(%x, %d, axis=2)
  %sd = ScatterElements(%x, %d, %u, axis=-1, reduction="add")
  %sn = ScatterElements(%x, %ie, %u, axis=-1)
  %g2 = call @layer(%x, %ie, %u)
  return %g, %s, %gd, %sd, %sn, %g2
}"""

INDEX_FITS = tuple((fam, "Float32", FitModel("linear", ("bytes", "width", "inner"),
                                             intercept=b, coef=(1e-9, 1e-7, 1e-6)))
                   for fam, b in (("gather_elements", 1e-5), ("scatter_elements", 2e-5)))


def test_a_broadcast_index_is_priced_by_its_distinct_elements() -> None:
    hw = Hardware(**BASE, fits=INDEX_FITS)
    sim = simulate(distir.parse(INDEXED), hw)
    got = {op.outputs[0].name: secs for _, secs, _, op, *_ in sim.events()}
    x = 8 * 16 * 32 * 4
    # a broadcast index: its 512 distinct int64 elements, read 8 times
    g = 2 * x + 16 * 32 * 8
    assert got["g"] == pytest.approx(1e-5 + 1e-9 * g + 1e-7 * 32 + 1e-6 * 8)
    assert got["g2"] == pytest.approx(got["g"])  # through a call
    assert got["s"] == pytest.approx(2e-5 + 1e-9 * (g + x) + 1e-7 * 32 + 1e-6 * 8)
    d = 2 * x + 8 * 16 * 32 * 8  # a dense index: every element
    assert got["gd"] == pytest.approx(1e-5 + 1e-9 * d + 1e-7 * 32 + 1e-6)
    assert got["sd"] == pytest.approx(2e-5 + 1e-9 * (d + x) + 1e-7 * 32 + 1e-6)
    # a scatter that overwrites is not the adding one measured: memory-bound as before
    assert got["sn"] == pytest.approx(hw.memory_time(3 * x + 8 * 16 * 32 * 8, 0.0,
                                                     "Float32"))
    # a profile without the families: every byte of the index at the memory's bandwidth
    old = simulate(distir.parse(INDEXED), Hardware(**BASE))
    got_old = {op.outputs[0].name: secs for _, secs, _, op, *_ in old.events()}
    assert got_old["g"] == pytest.approx(hw.memory_time(d, 0.0, "Float32"))


# a token tensor transposed, then reshaped: to a matrix (no view: torch.reshape copies),
# split along its strided axis (a view); a reshape of a contiguous result (a view)
RESHAPES = """
func @main(%t: Tensor[Float32, (2, 64, 32), 0], %u: Tensor[Float32, (2, 64, 32), 0]) {
  %tt = Transpose(%t, perm=[0, 2, 1])
  %s = Constant(value=dense<Int64>[2, 2048], device=0)
  %flat = Reshape(%tt, %s)
  %s4 = Constant(value=dense<Int64>[2, 4, 8, 64], device=0)
  %split = Reshape(%tt, %s4)
  %v = Relu(%u)
  %plain = Reshape(%v, %s)
  return %flat, %split, %plain
}"""


def test_a_reshape_that_no_view_gives_costs_a_copy() -> None:
    """The backend's ``torch.reshape`` copies a strided input it cannot view; the copy is
    priced as the transposing copy it is (the profile's ``copy`` fit where it has one, else
    at the memory's bandwidth); views are free."""
    hw = Hardware(**BASE, fits=NCHW)
    sim = simulate(distir.parse(RESHAPES), hw)
    got = {op.outputs[0].name: secs for _, secs, _, op, *_ in sim.events()}
    assert got["flat"] == pytest.approx(hw.memory_time(2.0 * 2 * 64 * 32 * 4, 0.0, "Float32"))
    assert got["flat"] > 0 and got["split"] == 0 and got["plain"] == 0


def test_a_reshape_after_a_batch_transpose_is_a_view() -> None:
    """A transpose that moves a batch axis is a copy (priced at the transpose), so the
    reshape of its result views a contiguous tensor: free, and without a record of its
    own (``memory.layout_sensitive``). (A softmax's result is contiguous; an elementwise
    op's of a parameter would take the parameter's order.)"""
    from distir.analysis.memory import layout_sensitive

    text = """
func @main(%q: Tensor[Float32, (2, 3, 4, 8), 0]) {
  %r = Softmax(%q, axis=-1)
  %t = Transpose(%r, perm=[0, 2, 1, 3])
  %s = Constant(value=dense<Int64>[2, 4, 24], device=0)
  %m = Reshape(%t, %s)
  return %m
}"""
    fn = distir.parse(text)
    fn = getattr(fn, "entry", fn)
    assert not any(op.op_type == "Reshape" for op in layout_sensitive(fn))
    hw = Hardware(**BASE, fits=NCHW)
    got = {op.outputs[0].name: secs for _, secs, _, op, *_ in simulate(fn, hw).events()}
    assert got["m"] == 0  # (the transpose is priced by the copy fit, where one is)


def test_reshape_target_reads_zero_and_minus_one_as_onnx_does() -> None:
    import numpy as np

    from distir.analysis.layout import reshape_target
    from distir.analysis.values import make_concrete
    from distir.ir import FunctionBuilder, TensorType

    b = FunctionBuilder("r")
    x = b.param("x", TensorType(distir.DType.Float32, (2, 3, 4), 0))
    s = b.param("s", TensorType(distir.DType.Int64, (3,), 0))
    r = b.op("Reshape", x, s)
    keep0 = b.op("Reshape", x, s, allowzero=1)
    f = b.op("Flatten", x, axis=-1)
    fn = b.ret(r, keep0, f)
    reshape, allow, flatten = fn.ops

    def target(op, value):  # noqa: ANN001, ANN202
        arr = np.array(value, dtype=np.int64)
        return reshape_target(op, (2, 3, 4), (None, make_concrete(arr, 0)))

    assert target(reshape, [0, -1, 2]) == (2, 6, 2)
    assert target(reshape, [-1, 4]) == (6, 4)
    assert target(allow, [0, 24, 1]) == (0, 24, 1)
    assert reshape_target(flatten, (2, 3, 4), (None,)) == (6, 4)
    assert reshape_target(reshape, (2, 3, 4), (None, None)) is None


def test_a_reduction_is_read_in_memory_order() -> None:
    """``reduced_blocks`` reads a reduction's axes by decreasing stride, merging adjacent
    axes of one kind: a transposed token tensor's bias gradient reads as a convolution's
    (``inner`` the tokens), a per-head bias's keeps runs of the head width."""
    from distir.analysis.cost.compute import reduced_blocks

    f, t = False, True
    assert reduced_blocks((4, 200, 768), (f, f, t)) == (768, 1, 768)  # a column sum
    assert reduced_blocks((4, 768, 200), (f, t, f)) == (768, 200, 768)  # over pixels
    # [4, 200, 768] viewed from [4, 768, 200]: the same as the line above
    assert reduced_blocks((4, 200, 768), (f, f, t), (768 * 200, 1, 200)) == (768, 200, 768)
    assert reduced_blocks((4, 12, 200, 64), (f, t, f, t)) == (768, 1, 64)  # per head
    assert reduced_blocks((4, 1, 200, 64), (f, t, f, t)) == (64, 1, 64)  # (axes of 1)
    assert reduced_blocks((4, 200), (f, f)) == (1, 800, 1)  # nothing kept
    assert reduced_blocks((4, 200), (t, t)) == (800, 1, 800)  # nothing reduced


# a token tensor [2, C, 64] transposed to [2, 64, C] (the last two axes: a view), its bias
# gradient; the same sum of a contiguous tensor; a per-head bias's gradient (the last two
# of other ops' results: contiguous, so that only the first has records by its strides)
REDUCES = """
func @main(%t: Tensor[Float32, (2, 32, 64), 0], %u: Tensor[Float32, (2, 64, 32), 0],
           %h: Tensor[Float32, (2, 4, 64, 8), 0]) {
  %tt = Transpose(%t, perm=[0, 2, 1])
  %axes = Constant(value=dense<Int64>[0, 1], device=0)
  %viewed = ReduceSum(%tt, %axes, keepdims=0)
  %ur = Softmax(%u, axis=-1)
  %plain = ReduceSum(%ur, %axes, keepdims=0)
  %hr = Softmax(%h, axis=-1)
  %axes2 = Constant(value=dense<Int64>[0, 2], device=0)
  %head = ReduceSum(%hr, %axes2, keepdims=0)
  return %viewed, %plain, %head
}"""


def test_reductions_of_one_type_are_priced_by_their_own_strides() -> None:
    """Two reductions of the same types and attributes, one of a transposed view and one
    of a contiguous parameter, share no record: each is priced by its own layout; and
    two concatenations of the same types, one with a part expanded from a scalar, each
    by whether a part is a view."""
    fit = FitModel("linear", ("inner",), intercept=1e-5, coef=(1e-6,))
    cat = FitModel("linear", ("contiguous",), intercept=1e-5, coef=(-2e-6,))
    hw = Hardware(**BASE, fits=(("reduce", "Float32", fit), ("concat", "Float32", cat)))
    text = """
func @main(%t: Tensor[Float32, (2, 32, 64), 0], %u: Tensor[Float32, (2, 64, 32), 0]) {
  %tt = Transpose(%t, perm=[0, 2, 1])
  %axes = Constant(value=dense<Int64>[0, 1], device=0)
  %viewed = ReduceSum(%tt, %axes, keepdims=0)
  %plain = ReduceSum(%u, %axes, keepdims=0)
  %z = Constant(value=dense<Float32, ()>[0.0], device=0)
  %s = Constant(value=dense<Int64>[2, 1, 32], device=0)
  %zero = Expand(%z, %s)
  %from = Constant(value=dense<Int64>[0], device=0)
  %to = Constant(value=dense<Int64>[1], device=0)
  %one = Slice(%u, %from, %to, %to)
  %padded = Concat(%zero, %u, axis=1)
  %sliced = Concat(%one, %u, axis=1)
  %whole = Concat(%u, %u, axis=1)
  return %viewed, %plain, %padded, %sliced, %whole
}"""
    got = {op.outputs[0].name: secs for _, secs, _, op, *_ in
           simulate(distir.parse(text), hw).events()}
    assert got["viewed"] == pytest.approx(fit({"inner": 64.0}))
    assert got["plain"] == pytest.approx(fit({"inner": 1.0}))
    assert got["padded"] == pytest.approx(cat({"contiguous": 1.0}))  # a stride-0 part
    assert got["sliced"] == pytest.approx(cat({"contiguous": 1.0}))  # a row of each batch
    assert got["whole"] == pytest.approx(cat({"contiguous": 2.0}))


def test_a_reduction_of_a_view_is_priced_in_its_storage_order() -> None:
    """The simulator hands a reduction of a strided view its input's strides
    (``layout.INPUT_STRIDES``), so the ``reduce`` fit sees the axes PyTorch reads:
    ``inner`` the 64 tokens, not a column sum's 1; a per-head bias's gradient its ``run``
    of 8."""
    from distir.analysis.hardware import rowwise_features
    from distir.analysis.memory import layout_sensitive

    fit = FitModel("linear", ("inner", "run"), intercept=1e-5, coef=(1e-6, 1e-7))
    hw = Hardware(**BASE, fits=(("reduce", "Float32", fit),))
    fn = distir.parse(REDUCES)
    fn = getattr(fn, "entry", fn)
    assert {op.outputs[0].name for op in layout_sensitive(fn)} == {"viewed"}
    got = {op.outputs[0].name: secs for _, secs, _, op, *_ in simulate(fn, hw).events()}
    nbytes = 4.0 * (2 * 64 * 32 + 32)
    assert got["viewed"] == pytest.approx(fit(rowwise_features(nbytes, 32, 64)))
    assert got["plain"] == pytest.approx(fit(rowwise_features(nbytes, 32, 1)))
    assert got["head"] == pytest.approx(fit(rowwise_features(4.0 * (2 * 4 * 64 * 8 + 32),
                                                             32, 1, 8)))


def test_iteration_order_agrees_with_torch() -> None:
    """An elementwise op's result takes the memory order ``iteration_order`` finds from
    its operands' strides, as PyTorch's ``TensorIterator`` lays it out: random permuted
    views, contiguous tensors and broadcast operands, in either position."""
    from distir.analysis.layout import _broadcast_strides, iteration_order

    rng = random.Random(1)
    permuted = 0
    for _ in range(300):
        rank = rng.randint(2, 4)
        shape = tuple(rng.choice([1, 2, 3, 5]) for _ in range(rank))
        operands = []
        for _ in range(rng.randint(1, 3)):
            kind = rng.random()
            if kind < 0.5:  # a permuted view
                perm = list(range(rank))
                rng.shuffle(perm)
                inv = [perm.index(d) for d in range(rank)]
                t = torch.empty([shape[p] for p in perm]).permute(inv)
            elif kind < 0.8:
                t = torch.empty(shape)
            else:  # broadcast along some axes
                t = torch.empty([d if rng.random() < 0.5 else 1 for d in shape])
            operands.append(t)
        got = torch.zeros(())
        for t in operands:
            got = got + t if got.dim() else t * 1
        out_shape = tuple(got.shape)
        order = iteration_order(out_shape, [
            _broadcast_strides(tuple(t.shape), tuple(t.stride()), out_shape)
            for t in operands])
        dense = [0] * rank
        acc = 1
        for a in order:
            dense[a] = acc
            acc *= out_shape[a]
        want = tuple(got.stride())
        if len(operands) == 1:  # (t * 1: the one operand's order)
            want = tuple((operands[0] * 1).stride())
        assert all(g == w for g, w, d in zip(dense, want, out_shape, strict=True) if d != 1), \
            ([(tuple(t.shape), t.stride()) for t in operands], dense, want)
        permuted += want != contiguous_strides(out_shape)
    assert permuted > 50


ORDERED = """
func @main(%a: Tensor[Float32, (2, 32, 64), 0], %b: Tensor[Float32, (2, 64, 32), 0]) {
  %bt = Transpose(%b, perm=[0, 2, 1])
  %mis = Add(%a, %bt)
  %rev = Sub(%bt, %a)
  %same = Mul(%bt, %bt)
  %axes = Constant(value=dense<Int64>[0, 1], device=0)
  %sum = ReduceSum(%same, %axes, keepdims=0)
  %bias = Constant(value=dense<Float32>[1.0], device=0)
  %plain = Add(%a, %bias)
  return %mis, %rev, %sum, %plain
}"""


def test_an_operand_read_across_its_rows_costs_its_transposing_copy() -> None:
    """``a + b^T`` (``b^T`` a transposed view) reads ``b^T`` across its rows: priced at the
    ``copy`` fit of that operand (rows of the result's innermost 64, read from its own
    innermost 32); ``b^T - a`` takes ``b^T``'s order and reads ``a`` across (rows of 32
    read from 64); ``b^T * b^T`` reads nothing across and writes a transposed result, which
    a reduction then reads in that order (``inner`` 32 tokens, not a column sum's 1)."""
    from distir.analysis.hardware import rowwise_features

    copy = FitModel("linear", ("width", "inner"), intercept=1e-4, coef=(1e-6, 1e-7))
    red = FitModel("linear", ("inner",), intercept=1e-5, coef=(1e-6,))
    hw = Hardware(**BASE, fits=(("copy", "Float32", copy), ("reduce", "Float32", red)))
    fn = distir.parse(ORDERED)
    fn = getattr(fn, "entry", fn)
    got = {op.outputs[0].name: secs for _, secs, _, op, *_ in simulate(fn, hw).events()}
    nbytes = 2.0 * 4 * 2 * 32 * 64
    plain = hw.memory_time(3 * nbytes / 2, 2 * 32 * 64, "Float32")
    assert got["mis"] == pytest.approx(copy(rowwise_features(nbytes, 64, 32)))
    assert got["rev"] == pytest.approx(copy(rowwise_features(nbytes, 32, 64)))
    assert got["mis"] != got["rev"] and min(got["mis"], got["rev"]) > 10 * plain
    assert got["same"] == pytest.approx(plain)
    assert got["sum"] == pytest.approx(red(rowwise_features(4.0 * (2 * 32 * 64 + 64), 64, 32)))
    assert got["plain"] < 2 * plain


def test_an_elementwise_result_keeps_its_order_across_a_call() -> None:
    """A called function's result that an elementwise op of a transposed view wrote is
    transposed in its caller: the caller's ``Add`` of it and a contiguous tensor reads one
    across its rows, where the same ``Add`` of two contiguous tensors does not."""
    copy = FitModel("linear", ("width", "inner"), intercept=1e-4, coef=(1e-6, 1e-7))
    hw = Hardware(**BASE, fits=(("copy", "Float32", copy),))
    t = "Tensor[Float32, (2, 32, 32), 0]"
    m = distir.parse(f"""
func @scaled(%x: {t}) {{
  %xt = Transpose(%x, perm=[0, 2, 1])
  %two = Constant(value=dense<Float32>[2.0], device=0)
  %y = Mul(%xt, %two)
  return %y
}}

func @main(%a: {t}, %b: {t}) {{
  %s = call @scaled(%b)
  %mis = Add(%a, %s)
  %c = Relu(%b)
  %ok = Add(%a, %c)
  return %mis, %ok
}}""")
    got = {op.outputs[0].name: secs for _, secs, _, op, *_ in simulate(m["main"], hw).events()
           if op.outputs}
    assert got["mis"] > 10 * got["ok"]


CONV_VIEW = """
func @f(%t: Tensor[Float32, (2, 64, 32), 0], %w: Tensor[Float32, (32, 1, 3, 3), 0]) {
""" + TOKENS_CONV + """  %s2 = Constant(value=dense<Int64>[2, 32, 64], device=0)
  %f = Reshape(%y, %s2)
  %o = Transpose(%f, perm=[0, 2, 1])
  return %o
}

func @main(%t: Tensor[Float32, (2, 64, 32), 0], %w: Tensor[Float32, (32, 1, 3, 3), 0],
           %b: Tensor[Float32, (2, 64, 32), 0]) {
  %t1 = Relu(%t)
  %o1 = call @f(%t1, %w)
  %a1 = Add(%o1, %b)
  %o2 = call @f(%t, %w)
  %a2 = Add(%o2, %b)
  return %a1, %a2
}"""


def _add_conv_costs(fn: object, hw: Hardware) -> tuple[float, list[tuple[str, float]]]:
    sim = simulate(fn, hw)
    return sim.latency_s, [(op.outputs[0].name, secs) for _, secs, _, op, *_ in sim.events()
                           if op.op_type in ("Add", "Conv")]


def test_a_channels_last_result_keeps_its_format_in_every_run() -> None:
    """A convolution run channels-last writes its result in that format whenever its
    function runs, not only the first time its record is made: @f runs twice (two summary
    keys), its results are views of the same token layout both times, and the program
    simulates as its inlined form does."""
    from distir.ir.inline import inline_calls

    copy = FitModel("linear", ("width", "inner"), intercept=1e-4, coef=(1e-6, 1e-7))
    hw = Hardware(**BASE, fits=(*NCHW, *NHWC, ("copy", "Float32", copy)))
    fn = distir.parse(CONV_VIEW).entry
    called, inlined = _add_conv_costs(fn, hw), _add_conv_costs(inline_calls(fn), hw)
    assert called[0] == pytest.approx(inlined[0])
    assert [c for _, c in called[1]] == pytest.approx([c for _, c in inlined[1]])


def test_a_call_summary_tells_strided_arguments_apart() -> None:
    """A callee's summary is keyed by its arguments' strides too: @f's ``Add`` reads its
    transposed argument across its rows in the third call alone, as inlined."""
    from distir.ir.inline import inline_calls

    copy = FitModel("linear", ("width", "inner"), intercept=1e-4, coef=(1e-6, 1e-7))
    hw = Hardware(**BASE, fits=(("copy", "Float32", copy),))
    t = "Tensor[Float32, (2, 32, 32), 0]"
    fn = distir.parse(f"""
func @f(%p: {t}, %c: {t}) {{
  %y = Add(%c, %p)
  return %y
}}

func @main(%a: {t}, %b: {t}) {{
  %bt = Transpose(%a, perm=[0, 2, 1])
  %r0 = call @f(%a, %b)
  %r1 = call @f(%bt, %b)
  %r2 = call @f(%a, %b)
  return %r0, %r1, %r2
}}""").entry
    called, inlined = _add_conv_costs(fn, hw), _add_conv_costs(inline_calls(fn), hw)
    assert called[0] == pytest.approx(inlined[0])
    adds = [c for _, c in called[1]]
    assert adds[1] > 10 * adds[0] and adds[0] == pytest.approx(adds[2])


def test_an_elementwise_op_of_a_channels_last_result() -> None:
    """A convolution's channels-last result is strided for its readers in the entry
    function too: an ``Add`` of it and an NCHW tensor reads one across its rows, and a
    convolution of its ``Relu`` (which keeps the format) runs channels-last."""
    copy = FitModel("linear", ("width", "inner"), intercept=1e-4, coef=(1e-6, 1e-7))
    hw = Hardware(**BASE, fits=(*NCHW, *NHWC, ("copy", "Float32", copy)))
    fn = distir.parse("""
func @main(%t: Tensor[Float32, (2, 64, 32), 0], %img: Tensor[Float32, (2, 32, 8, 8), 0],
           %w: Tensor[Float32, (32, 1, 3, 3), 0]) {
""" + TOKENS_CONV + """  %a = Add(%y, %img)
  %ax = Add(%x, %img)
  %r = Relu(%y)
  %z = Conv(%r, %w, group=32, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
  return %a, %ax, %z
}""")
    fn = getattr(fn, "entry", fn)
    got = {op.outputs[0].name: secs for _, secs, _, op, *_ in simulate(fn, hw).events()}
    assert got["a"] == pytest.approx(got["ax"]) and got["a"] > 10 * got["r"]
    assert got["z"] == pytest.approx(got["y"])  # both channels-last


def test_gelu_grad_takes_its_gradients_order() -> None:
    """``GeluGrad(x, dy)`` runs ``gelu_backward(dy, x)``, whose result takes ``dy``'s order
    (torch: ``x`` transposed, ``dy`` contiguous gives a contiguous result), where
    ``ReluGrad`` (``threshold_backward``) takes ``x``'s."""
    from distir.analysis.hardware import rowwise_features

    copy = FitModel("linear", ("width", "inner"), intercept=1e-4, coef=(1e-6, 1e-7))
    hw = Hardware(**BASE, fits=(("copy", "Float32", copy),))
    fn = distir.parse("""
func @main(%a: Tensor[Float32, (2, 32, 64), 0], %dy: Tensor[Float32, (2, 64, 32), 0]) {
  %x = Transpose(%a, perm=[0, 2, 1])
  %g = GeluGrad(%x, %dy)
  %r = ReluGrad(%x, %dy)
  %c = Relu(%dy)
  %g2 = Add(%g, %c)
  %r2 = Add(%r, %c)
  return %g2, %r2
}""")
    fn = getattr(fn, "entry", fn)
    got = {op.outputs[0].name: secs for _, secs, _, op, *_ in simulate(fn, hw).events()}
    x = torch.randn(2, 32, 64).transpose(1, 2)
    dy = torch.randn(2, 64, 32)
    assert torch.ops.aten.gelu_backward(dy, x).is_contiguous()
    assert not torch.ops.aten.threshold_backward(dy, x, 0).is_contiguous()
    assert got["g2"] < got["r2"] / 10  # g is contiguous like c; r is transposed
    # each reads one operand across: GeluGrad x (rows of dy's 32 from x's 64), ReluGrad dy
    assert got["g"] == pytest.approx(copy(rowwise_features(2 * 4 * 2 * 64 * 32, 32, 64)))
    assert got["r"] == pytest.approx(copy(rowwise_features(2 * 4 * 2 * 64 * 32, 64, 32)))


def test_a_convolution_is_priced_by_each_calls_argument_strides() -> None:
    """One callee convolves a channels-last view in one call and an NCHW tensor in the
    other, in either order: each call's ``Conv`` and the ``Add`` of its result are priced
    by that call's strides, as inlined (a convolution's own record is keyed by them)."""
    from distir.ir.inline import inline_calls

    copy = FitModel("linear", ("width", "inner"), intercept=1e-4, coef=(1e-6, 1e-7))
    hw = Hardware(**BASE, fits=(*NCHW, *NHWC, ("copy", "Float32", copy)))
    img = "Tensor[Float32, (2, 32, 8, 8), 0]"
    for first, second in (("img", "x"), ("x", "img")):
        fn = distir.parse(f"""
func @f(%p: {img}, %w: Tensor[Float32, (32, 1, 3, 3), 0], %q: {img}) {{
  %y = Conv(%p, %w, group=32, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
  %a = Add(%y, %q)
  return %a
}}

func @main(%t: Tensor[Float32, (2, 64, 32), 0], %img: {img},
           %w: Tensor[Float32, (32, 1, 3, 3), 0], %q: {img}) {{
  %tt = Transpose(%t, perm=[0, 2, 1])
  %s = Constant(value=dense<Int64>[2, 32, 8, 8], device=0)
  %x = Reshape(%tt, %s)
  %r0 = call @f(%{first}, %w, %q)
  %r1 = call @f(%{second}, %w, %q)
  return %r0, %r1
}}""").entry
        called, inlined = _add_conv_costs(fn, hw), _add_conv_costs(inline_calls(fn), hw)
        assert called[0] == pytest.approx(inlined[0])
        assert [c for _, c in called[1]] == pytest.approx([c for _, c in inlined[1]])
        convs = [c for name, c in called[1] if name == "y"]
        assert convs[0] != pytest.approx(convs[1])


def test_ordered_ops_are_the_elementwise_cost_rules_ops() -> None:
    """``layout.ORDERED_OPS`` are the elementwise ops the cost rules know (``SIMPLE`` and
    ``TRANSCENDENTAL``) but for those the backend does not run as one ``TensorIterator``
    over their operands (optimizer and loss updates, n-ary sums, dropout's masks, the
    piecewise ``Shrink`` and ``ThresholdedRelu``): an elementwise op added to the cost
    rules is added here too, or named below."""
    from distir.analysis.cost.compute import SIMPLE, TRANSCENDENTAL
    from distir.analysis.layout import ORDERED_OPS

    apart = {"Dropout", "MSELossGrad", "Mean", "SGDOptimizer", "Shrink", "Sum",
             "ThresholdedRelu"}
    assert ORDERED_OPS == (set(SIMPLE) | set(TRANSCENDENTAL)) - apart
