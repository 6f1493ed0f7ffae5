"""Convolutions of more than one group (depthwise, ResNeXt-like) cost the profile's
``conv_grouped`` families where it fits them, the one-group ones their ``conv`` families, on
a tiny made-up profile with hand-computed times; and the grouped shapes the calibration
measures."""

from __future__ import annotations

import pytest

import distir
from distir.analysis.hardware import FitModel, Hardware, LinkSpec
from distir.analysis.simulator import simulate

BASE = dict(name="t", memory_bytes=1 << 34, peak_flops=(("Float32", 1e12),),
            memory_bandwidth=1e11, launch_overhead=1e-6, devices_per_node=4,
            intra_node=(LinkSpec(2, 1e10, 1e-6),), inter_node=(LinkSpec(2, 1e9, 1e-5),))
CONV = FitModel("linear", ("flops",), intercept=1e-5, coef=(1e-12,))
GROUPED = FitModel("linear", ("bytes", "groups"), intercept=2e-5, coef=(1e-10, 1e-7))
DGRAD = FitModel("linear", ("bytes",), intercept=3e-5, coef=(2e-10,))
WGRAD = FitModel("linear", ("bytes", "cin"), intercept=4e-5, coef=(3e-10, 1e-6))
FITS = (("conv", "Float32", CONV), ("conv_dgrad", "Float32", CONV),
        ("conv_wgrad", "Float32", CONV))
HW = Hardware(**BASE, fits=(*FITS, ("conv_grouped", "Float32", GROUPED),
                            ("conv_grouped_dgrad", "Float32", DGRAD),
                            ("conv_grouped_wgrad", "Float32", WGRAD)))
PLAIN = Hardware(**BASE, fits=FITS)

# a depthwise 3 x 3 over 32 channels of 8 x 8 pixels, batch 2; and a one-group 1 x 1
TEXT = """
func @main(%x: Tensor[Float32, (2, 32, 8, 8), 0], %w: Tensor[Float32, (32, 1, 3, 3), 0],
           %w1: Tensor[Float32, (16, 32, 1, 1), 0], %dy: Tensor[Float32, (2, 32, 8, 8), 0]) {
  %y = Conv(%x, %w, group=32, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
  %dx, %dw = ConvGrad(%x, %w, %dy, group=32, pads=[1, 1, 1, 1], strides=[1, 1],
                       dilations=[1, 1])
  %z = Conv(%x, %w1, kernel_shape=[1, 1])
  return %y, %dx, %dw, %z
}"""


def _costs(hw: Hardware) -> dict[str, float]:
    sim = simulate(distir.parse(TEXT), hw)
    return {op.outputs[0].name: secs for _, secs, _, op, *_ in sim.events()}


def test_grouped_convolutions_take_the_grouped_fits() -> None:
    got = _costs(HW)
    nbytes = (2 * 32 * 64 + 32 * 9 + 2 * 32 * 64) * 4  # x, w, y
    assert got["y"] == pytest.approx(2e-5 + 1e-10 * nbytes + 1e-7 * 32)
    # dgrad and wgrad both used: the sum of their fits (cin = 1 channel per group)
    assert got["dx"] == pytest.approx(3e-5 + 2e-10 * nbytes + 4e-5 + 3e-10 * nbytes + 1e-6)
    # the one-group 1 x 1 keeps the conv fit: 2 * (2 * 64) * 16 * 32 FLOPs
    assert got["z"] == pytest.approx(1e-5 + 1e-12 * 2 * 128 * 16 * 32)
    # a profile without grouped fits prices the grouped ones as before (implicit GEMMs)
    old = _costs(PLAIN)
    assert old["z"] == pytest.approx(got["z"])
    assert old["y"] != pytest.approx(got["y"]) and old["dx"] != pytest.approx(got["dx"])


def test_grouped_shapes() -> None:
    from calibration.bench_train import grouped_conv_shapes

    shapes = grouped_conv_shapes(False, True, 120)
    assert len(shapes) == 120 and len(set(shapes)) == 120
    depthwise = [s for s in shapes if s[1] == s[2] == s[6]]
    assert 0.5 < len(depthwise) / len(shapes) < 0.85
    for _n, c, m, _h, k, s, g in shapes:
        assert g > 1 and c % g == 0 and m % g == 0 and k in (3, 5, 7) and s in (1, 2)
    quick = grouped_conv_shapes(True, False, 8)
    assert all(s[3] <= 14 and s[1] <= 16 for s in quick)


def test_patch_embedding_shapes() -> None:
    from calibration.bench_train import conv_shapes, patch_conv_shapes

    patches = patch_conv_shapes(False, True, 60, 3)
    assert len(patches) == 60 and len(set(patches)) == 60
    for _n, _c, _m, h, k, s, g, p in patches:
        assert g == 1 and ((k == s and p == 0 and h % k == 0) or (k, s, p) == (7, 4, 3))
    assert {k for *_, k, s, _g, p in patches if p == 0} >= {2, 4, 8, 16}
    both = conv_shapes(False, True, 240, 3)
    assert len(both) == 300 and both[240:] == patches  # the CNN sample first, unchanged


# SEW-D's positional convolution (16 groups, kernel 128, stride 2) and a dense 1-D one
TEXT_1D = """
func @main(%x: Tensor[Float32, (2, 64, 199), 0], %w: Tensor[Float32, (64, 4, 128), 0],
           %dy: Tensor[Float32, (2, 64, 100), 0], %w1: Tensor[Float32, (32, 64, 3), 0]) {
  %y = Conv(%x, %w, group=16, kernel_shape=[128], pads=[64, 64], strides=[2])
  %dx, %dw = ConvGrad(%x, %w, %dy, group=16, pads=[64, 64], strides=[2], dilations=[1])
  %z = Conv(%x, %w1, kernel_shape=[3])
  return %y, %dx, %dw, %z
}"""


def test_one_d_convolutions_take_the_conv1d_fits() -> None:
    hw = Hardware(**BASE, fits=(*FITS, ("conv1d", "Float32", GROUPED),
                                ("conv1d_dgrad", "Float32", DGRAD),
                                ("conv1d_wgrad", "Float32", WGRAD)))
    sim = simulate(distir.parse(TEXT_1D), hw)
    got = {op.outputs[0].name: secs for _, secs, _, op, *_ in sim.events()}
    nbytes = (2 * 64 * 199 + 64 * 4 * 128 + 2 * 64 * 100) * 4  # x, w, y
    assert got["y"] == pytest.approx(2e-5 + 1e-10 * nbytes + 1e-7 * 16)
    assert got["dx"] == pytest.approx(3e-5 + 2e-10 * nbytes + 4e-5 + 3e-10 * nbytes + 4e-6)
    zbytes = (2 * 64 * 199 + 32 * 64 * 3 + 2 * 32 * 197) * 4
    assert got["z"] == pytest.approx(2e-5 + 1e-10 * zbytes + 1e-7)  # dense: groups 1
    # a profile without them prices 1-D convolutions as implicit GEMMs, as before
    old = simulate(distir.parse(TEXT_1D), PLAIN)
    assert {op.outputs[0].name: secs for _, secs, _, op, *_ in old.events()}["y"] != \
        pytest.approx(got["y"])


# SqueezeBERT's projection: a kernel-1 convolution in 4 groups of the transposed token
# tensor [N, L, C], its gradients with a dy of either layout
TEXT_NWC = """
func @main(%t: Tensor[Float32, (2, 32, 64), 0], %w: Tensor[Float32, (128, 16, 1), 0],
           %dt: Tensor[Float32, (2, 32, 128), 0], %dyc: Tensor[Float32, (2, 128, 32), 0]) {
  %x = Transpose(%t, perm=[0, 2, 1])
  %dy = Transpose(%dt, perm=[0, 2, 1])
  %y = Conv(%x, %w, group=4, kernel_shape=[1])
  %dx, %dw = ConvGrad(%x, %w, %dy, group=4, pads=[0, 0], strides=[1], dilations=[1])
  %dx2, %dw2 = ConvGrad(%x, %w, %dyc, group=4, pads=[0, 0], strides=[1], dilations=[1])
  return %y, %dx, %dw, %dx2, %dw2
}"""
def _one_d_hw() -> Hardware:
    return Hardware(**BASE, fits=(*FITS, ("conv1d", "Float32", GROUPED),
                                  ("conv1d_dgrad", "Float32", DGRAD),
                                  ("conv1d_wgrad", "Float32", WGRAD)))


def test_transposed_one_d_convolutions_are_copied_first() -> None:
    """PyTorch runs a 1-D convolution on contiguous tensors: a transposed token tensor
    (SqueezeBERT's) is copied first, and a gradient's transposed ``dy``; the kernels are
    the ``conv1d`` fits' of the contiguous convolution."""
    hw = _one_d_hw()
    sim = simulate(distir.parse(TEXT_NWC), hw)
    got = {op.outputs[0].name: secs for _, secs, _, op, *_ in sim.events()}
    xb, wb, yb = 2 * 64 * 32 * 4, 128 * 16 * 4, 2 * 128 * 32 * 4
    nbytes = xb + wb + yb
    copy_x = hw.memory_time(2.0 * xb, 0.0, "Float32")
    copy_dy = hw.memory_time(2.0 * yb, 0.0, "Float32")
    assert got["y"] == pytest.approx(2e-5 + 1e-10 * nbytes + 1e-7 * 4 + copy_x)
    kernels = 3e-5 + 2e-10 * nbytes + 4e-5 + 3e-10 * nbytes + 1e-6 * 16
    assert got["dx2"] == pytest.approx(kernels + copy_x)  # dy contiguous
    assert got["dx"] == pytest.approx(kernels + copy_x + copy_dy)


def test_conv1d_shapes() -> None:
    from calibration.bench_train import (
        _speech_conv1d_shapes,
        conv1d_shapes,
        pointwise_conv1d_shapes,
    )

    shapes = conv1d_shapes(False, True, 240)
    assert len(shapes) == 320 and len(set(shapes)) == 320
    assert shapes[:240] == _speech_conv1d_shapes(False, True, 240, 0)  # as measured before
    points = pointwise_conv1d_shapes(False, True, 80)
    assert shapes[240:] == points
    assert all(s[4] == 1 and s[5] == 1 and s[7] == 0 for s in points)
    assert {s[6] for s in points} >= {1, 2, 4, 8}
    assert any(s[2] == 4 * s[1] for s in points) and any(s[1] == 4 * s[2] for s in points)
    shapes = shapes[:240]
    assert any(s[4] == 128 and s[6] == 16 for s in shapes)  # positional convolutions
    assert any(s[1] == 1 and s[4] == 10 for s in shapes)  # the raw signal's first layer
    assert any(s[6] == s[1] > 1 for s in shapes)  # depthwise
    assert {s[0] for s in shapes if s[4] == 128} >= {1, 8, 12, 16}


# ConvBERT's separable convolution: depthwise of the transposed tokens, then pointwise
TEXT_SEPARABLE = """
func @main(%t: Tensor[Float32, (2, 32, 64), 0], %wd: Tensor[Float32, (64, 1, 9), 0],
           %wp: Tensor[Float32, (32, 64, 1), 0]) {
  %x = Transpose(%t, perm=[0, 2, 1])
  %d = Conv(%x, %wd, group=64, kernel_shape=[9], pads=[4, 4])
  %p = Conv(%d, %wp, kernel_shape=[1])
  return %p
}"""


def test_a_one_d_convolution_writes_a_contiguous_result() -> None:
    """The depthwise convolution of the transposed tokens is copied first and writes a
    contiguous result: the pointwise convolution that reads it copies nothing."""
    hw = _one_d_hw()
    sim = simulate(distir.parse(TEXT_SEPARABLE), hw)
    got = {op.outputs[0].name: secs for _, secs, _, op, *_ in sim.events()}
    pbytes = (2 * 64 * 32 + 32 * 64 + 2 * 32 * 32) * 4
    assert got["p"] == pytest.approx(2e-5 + 1e-10 * pbytes + 1e-7)
    dbytes = (2 * 64 * 32 + 64 * 9 + 2 * 64 * 32) * 4
    assert got["d"] == pytest.approx(2e-5 + 1e-10 * dbytes + 1e-7 * 64 + hw.memory_time(
        2.0 * 2 * 64 * 32 * 4, 0.0, "Float32"))


# SegFormer-like: an image as a permuted view of tokens, a depthwise 3 x 3, then a 1 x 1
TEXT_NHWC_CHAIN = """
func @main(%t: Tensor[Float32, (2, 64, 32), 0], %wd: Tensor[Float32, (32, 1, 3, 3), 0],
           %w1: Tensor[Float32, (16, 32, 1, 1), 0]) {
  %v = Transpose(%t, perm=[0, 2, 1])
  %s = Constant(value=dense<Int64>[2, 32, 8, 8], device=0)
  %x = Reshape(%v, %s)
  %d = Conv(%x, %wd, group=32, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
  %p = Conv(%d, %w1, kernel_shape=[1, 1])
  return %p
}"""


def test_a_channels_last_convolution_hands_its_format_on() -> None:
    """cuDNN writes a channels-last 2-D convolution's result in that format: the 1 x 1
    convolution reading the depthwise one's result runs by the ``_nhwc`` fits too."""
    nhwc = FitModel("linear", ("bytes",), intercept=7e-5, coef=(5e-10,))
    hw = Hardware(**BASE, fits=(*FITS, ("conv_grouped", "Float32", GROUPED),
                                ("conv_grouped_nhwc", "Float32", nhwc),
                                ("conv_nhwc", "Float32", nhwc)))
    sim = simulate(distir.parse(TEXT_NHWC_CHAIN), hw)
    got = {op.outputs[0].name: secs for _, secs, _, op, *_ in sim.events()}
    pbytes = (2 * 32 * 64 + 16 * 32 + 2 * 16 * 64) * 4
    assert got["p"] == pytest.approx(7e-5 + 5e-10 * pbytes)
