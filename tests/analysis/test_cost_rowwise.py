"""The rows' shape of the memory-bound kernels whose speed per byte depends on it
(``compute.row_features``): layer norms and their gradients (the normalized width),
sum and mean reductions (the kept elements and the reduced ones after them), copying
transposes (the result's last axis and the input's) and pads; and the ``where`` and
``pad`` families, each used only where its measurements apply."""

from __future__ import annotations

import pytest

import distir
from distir.analysis.cost.compute import row_features
from distir.analysis.hardware import FitModel, Hardware, LinkSpec, rowwise_features
from distir.analysis.simulator import simulate
from distir.ir.types import DType, TensorType

BASE = dict(name="t", memory_bytes=1 << 34, peak_flops=(("Float32", 1e12),),
            memory_bandwidth=1e11, launch_overhead=1e-6, devices_per_node=4,
            intra_node=(LinkSpec(2, 1e10, 1e-6),), inter_node=(LinkSpec(2, 1e9, 1e-5),))
EW = FitModel("linear", ("bytes",), intercept=4e-6, coef=(1e-12,))
# Linear in bytes, and slower per byte over narrow rows: 1 ms per 1 / width.
BY_WIDTH = FitModel("linear", ("bytes", "width", "inner"), intercept=1e-5,
                    coef=(2e-12, 0.0, 0.0))
WIDE = FitModel("loglog", ("bytes", "width", "inner"), intercept=-20.0,
                coef=(1.0, -0.5, 0.25), degree=1, lo=(1.0, 1.0, 1.0),
                hi=(1e12, 1e6, 1e6))
WHERE = FitModel("linear", ("bytes",), intercept=2e-5, coef=(3e-12,))
PAD = FitModel("linear", ("bytes", "width"), intercept=3e-5, coef=(5e-12, 0.0))
HW = Hardware(**BASE, fits=(("elementwise", "any", EW), ("layernorm", "Float32", WIDE),
                            ("layernorm_grad", "Float32", WIDE), ("reduce", "Float32", WIDE),
                            ("copy", "Float32", WIDE), ("where", "Float32", WHERE),
                            ("pad", "Float32", PAD)))


def _t(*shape: int) -> TensorType:
    return TensorType(DType.Float32, shape, 0)


def _costs(text: str, hw: Hardware = HW) -> dict[str, float]:
    sim = simulate(distir.parse(text), hw)
    return {op.outputs[0].name: secs for _, secs, _, op, *_ in sim.events()}


def test_layer_norm_width_is_the_normalized_axes() -> None:
    x = _t(64, 56, 56, 96)
    assert row_features("LayerNormalization", (x, _t(96), _t(96)), (x,), {}, 8.0) == \
        rowwise_features(8.0, 96)
    x3 = _t(8, 512, 4, 192)
    got = row_features("LayerNormGrad", (x3, _t(4, 192), x3), (x3,), {"axis": 2}, 1.0)
    assert got["width"] == 4 * 192 and got["inner"] == 1


@pytest.mark.parametrize("shape, out, width, inner", [
    ((64, 28, 28, 192), (1, 1, 1, 192), 192, 1),   # a layer scale's gradient (keepdims)
    ((64, 192, 28, 28), (192,), 192, 784),          # a convolution's bias gradient
    ((4096, 768), (768,), 768, 1),                  # a linear layer's bias gradient
    ((64, 64, 7, 7), (64,), 64, 49),                # equal lengths: matched from the right
    ((8, 512), (), 1, 8 * 512),                     # to a scalar
    ((8, 512), (8, 1), 8, 512),                     # over the last axis, kept
])
def test_reduction_rows(shape: tuple, out: tuple, width: int, inner: int) -> None:
    got = row_features("ReduceSum", (_t(*shape), None), (_t(*out),), {}, 1.0)
    assert (got["width"], got["inner"]) == (width, inner)


def test_reductions_by_their_axes_and_without_unit_axes() -> None:
    """The axes the simulator knows (``REDUCED_AXES``) say which of two equal axes a
    reduction keeps, where the result's shape cannot; axes of length 1 are left out, as
    PyTorch squeezes them: ``[B, 1]`` summed to ``[1]`` reduces every element."""
    from distir.analysis.cost.compute import REDUCED_AXES

    x, y = _t(2, 16, 16, 16), _t(16)
    guessed = row_features("ReduceSum", (x, None), (y,), {}, 1.0)
    assert (guessed["width"], guessed["inner"]) == (16, 1)  # (taken for the last axis)
    known = row_features("ReduceSum", (x, None), (y,), {REDUCED_AXES: (0, 2, 3)}, 1.0)
    assert (known["width"], known["inner"]) == (16, 256)  # channels: a bias gradient
    older = row_features("ReduceMean", (x,), (y,), {"axes": [0, -2, -1]}, 1.0)
    assert older == known
    head = row_features("ReduceSum", (_t(8192, 1), None), (_t(1),), {}, 1.0)
    assert (head["width"], head["inner"]) == (1, 8192)


def test_other_ops_have_no_row_features() -> None:
    assert row_features("Add", (_t(4, 4), _t(4, 4)), (_t(4, 4),), {}, 1.0) is None
    assert row_features("ReduceMax", (_t(4, 4), None), (_t(4),), {}, 1.0) is None


def test_narrow_rows_cost_more_per_byte() -> None:
    """The fits read the features given: the same bytes normalized over 96 channels cost
    more than over 768, reduced from an image's pixels more than from rows."""
    costs = _costs("""
func @main(%a: Tensor[Float32, (64, 3136, 96), 0], %wa: Tensor[Float32, (96,), 0],
           %b: Tensor[Float32, (64, 392, 768), 0], %wb: Tensor[Float32, (768,), 0],
           %c: Tensor[Float32, (64, 96, 56, 56), 0], %d: Tensor[Float32, (200704, 96), 0]) {
  %na = LayerNormalization(%a, %wa, %wa, axis=-1)
  %nb = LayerNormalization(%b, %wb, %wb, axis=-1)
  %axes = Constant(value=dense<Int64>[0, 2, 3])
  %rc = ReduceSum(%c, %axes, keepdims=0)
  %axis0 = Constant(value=dense<Int64>[0])
  %rd = ReduceSum(%d, %axis0, keepdims=0)
  %tc = Transpose(%c, perm=[0, 2, 3, 1])
  return %na, %nb, %rc, %rd, %tc
}""")
    assert costs["na"] > costs["nb"]
    assert costs["rc"] > costs["rd"]
    x = _t(64, 96, 56, 56)
    nbytes = 2.0 * x.size_bytes
    assert costs["tc"] == pytest.approx(HW.kernel_time(
        "copy", nbytes, 0.0, "Float32", rowwise_features(nbytes, 96, 56)))


def test_where_and_pad_families() -> None:
    """``where`` prices a same-shape ``Where`` (a ReLU6's gradient), not a broadcast one;
    ``pad`` a constant ``Pad`` that pads, not one of zero pads (a copy)."""
    n = 64 * 32 * 56 * 56
    costs = _costs("""
func @main(%m: Tensor[Bool, (64, 32, 56, 56), 0], %x: Tensor[Float32, (64, 32, 56, 56), 0],
           %rowmask: Tensor[Bool, (56,), 0]) {
  %zero = Constant(value=dense<Float32, ()>[0.0])
  %same = Where(%m, %x, %zero)
  %bcast = Where(%rowmask, %x, %zero)
  %p1 = Constant(value=dense<Int64>[0, 0, 1, 1, 0, 0, 1, 1])
  %padded = Pad(%x, %p1)
  %p0 = Constant(value=dense<Int64>[0, 0, 0, 0, 0, 0, 0, 0])
  %copied = Pad(%x, %p0)
  return %same, %bcast, %padded, %copied
}""")
    assert costs["same"] == pytest.approx(2e-5 + 3e-12 * (n + 4 * n + 4 + 4 * n))
    assert costs["bcast"] == pytest.approx(4e-6 + 1e-12 * (56 + 4 * n + 4 + 4 * n))
    assert costs["padded"] == pytest.approx(3e-5 + 5e-12 * (4 * n + 4 * 64 * 32 * 58 * 58
                                                            + 8 * 8))
    assert costs["copied"] == pytest.approx(4e-6 + 1e-12 * (8 * n + 8 * 8))


def test_profiles_fitted_on_bytes_alone_price_as_before() -> None:
    """A profile whose fits read ``bytes`` only (every one measured before the rows'
    shape) prices these kernels by bytes, whatever the features given."""
    old = Hardware(**BASE, fits=(("elementwise", "any", EW), ("layernorm", "Float32", EW)))
    a = old.kernel_time("layernorm", 1e6, 0.0, "Float32", rowwise_features(1e6, 96))
    assert a == old.kernel_time("layernorm", 1e6, 0.0, "Float32") == pytest.approx(4e-6 + 1e-6)


def test_average_pools_are_priced_by_their_channels_and_stride() -> None:
    """``AveragePool`` and its gradient by the ``avgpool`` / ``avgpool_grad`` fits, with
    the channels as ``width`` and the stride as ``inner`` (a stride-1 pool writes four
    times the outputs of a stride-2 one); a profile without ``avgpool`` keeps the
    memory's bandwidth for the forward pool (PoolFormer's pools were priced so, 12x
    below their time on an H200)."""
    from distir.analysis.cost import COST_RULES

    pool = FitModel("linear", ("bytes", "width", "inner"), intercept=1e-5,
                    coef=(1e-11, 0.0, -1e-6))
    hw = Hardware(**BASE, fits=(("elementwise", "any", EW), ("avgpool", "Float32", pool),
                                ("avgpool_grad", "Float32", pool)))
    x, y1, y2 = _t(8, 64, 56, 56), _t(8, 64, 56, 56), _t(8, 64, 28, 28)
    win = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    rule = COST_RULES.get("AveragePool")
    one = rule("AveragePool", (x,), (y1,), {**win, "strides": [1, 1]}, hw).seconds
    two = rule("AveragePool", (x,), (y2,), {**win, "strides": [2, 2]}, hw).seconds
    nbytes = x.size_bytes + y1.size_bytes
    assert one == pytest.approx(1e-5 + 1e-11 * nbytes - 1e-6)
    assert two == pytest.approx(1e-5 + 1e-11 * (x.size_bytes + y2.size_bytes) - 2e-6)
    grad = COST_RULES.get("AveragePoolGrad")("AveragePoolGrad", (x, y1), (x,),
                                             {**win, "strides": [1, 1]}, hw).seconds
    assert grad == pytest.approx(1e-5 + 1e-11 * (2 * x.size_bytes + y1.size_bytes) - 1e-6)
    bare = Hardware(**BASE, fits=(("elementwise", "any", EW),))
    assert rule("AveragePool", (x,), (y1,), {**win, "strides": [1, 1]}, bare).seconds == \
        pytest.approx(bare.memory_time(float(nbytes), float(y1.numel * 9), "Float32"))


def test_group_norms_are_priced_by_their_groups() -> None:
    """``InstanceNormalization`` and ``GroupNormalization`` by the ``groupnorm`` fit, with
    a group's elements as ``width`` and a channel's pixels as ``inner`` (PoolFormer's
    one-group norm, exported as an instance norm of ``[N, 1, C * H * W]``, is one row of
    ``C * H * W`` per sample); a profile without the family keeps one pass at the
    memory's bandwidth."""
    from distir.analysis.cost import COST_RULES

    fit = FitModel("linear", ("bytes", "width", "inner"), intercept=1e-5,
                   coef=(1e-11, 1e-9, 1e-7))
    hw = Hardware(**BASE, fits=(("elementwise", "any", EW), ("groupnorm", "Float32", fit)))
    c = _t(64)
    one = _t(8, 1, 64 * 56 * 56)
    rule = COST_RULES.get("InstanceNormalization")
    t = rule("InstanceNormalization", (one, _t(1), _t(1)), (one,), {"epsilon": 1e-5},
             hw).seconds
    nbytes = 2 * one.size_bytes + 8
    assert t == pytest.approx(1e-5 + 1e-11 * nbytes + 1e-9 * 64 * 56 * 56 + 1e-7 * 64 * 56 * 56)
    x = _t(8, 64, 56, 56)
    g = COST_RULES.get("GroupNormalization")("GroupNormalization", (x, c, c), (x,),
                                             {"num_groups": 32, "epsilon": 1e-5}, hw).seconds
    assert g == pytest.approx(1e-5 + 1e-11 * (2 * x.size_bytes + 2 * c.size_bytes)
                              + 1e-9 * 2 * 56 * 56 + 1e-7 * 56 * 56)
    inst = rule("InstanceNormalization", (x, c, c), (x,), {"epsilon": 1e-5}, hw).seconds
    assert inst == pytest.approx(1e-5 + 1e-11 * (2 * x.size_bytes + 2 * c.size_bytes)
                                 + 1e-9 * 56 * 56 + 1e-7 * 56 * 56)
    # Statistics in float32 of a float16 X: the backend casts around the kernel, which is
    # not what the family measured (one pass, as without it).
    h, ch = TensorType(DType.Float16, (8, 64, 56, 56), 0), TensorType(DType.Float16, (64,), 0)
    half = COST_RULES.get("GroupNormalization")("GroupNormalization", (h, ch, ch), (h,),
                                                {"num_groups": 32, "stash_type": 1}, hw)
    assert half.seconds == pytest.approx(hw.memory_time(
        float(2 * h.size_bytes + 2 * ch.size_bytes), 5.0 * h.numel, "Float16"))
    bare = Hardware(**BASE, fits=(("elementwise", "any", EW),))
    nb = float(2 * x.size_bytes + 2 * c.size_bytes)
    assert rule("InstanceNormalization", (x, c, c), (x,), {"epsilon": 1e-5}, bare).seconds \
        == pytest.approx(bare.memory_time(nb, 5.0 * x.numel, "Float32"))


def test_training_batch_norms_read_a_fit_of_their_dtype() -> None:
    """A training-mode ``BatchNormalization`` (BiT's weight standardization, exported by
    TorchScript) and its gradient by ``batchnorm`` / ``batchnorm_grad`` fits keyed by
    dtype, with the channels and pixels as features: such a profile crashed the
    simulator (the lookup of an ``any`` fit missed, and the bytes alone were handed to a
    fit of three features)."""
    from distir.analysis.cost import COST_RULES

    fit = FitModel("linear", ("bytes", "channels", "spatial"), intercept=1e-5,
                   coef=(1e-11, 1e-8, 1e-9))
    hw = Hardware(**BASE, fits=(("elementwise", "any", EW), ("batchnorm", "Float32", fit),
                                ("batchnorm_grad", "Float32", fit)))
    x, c = _t(1, 64, 576), _t(64)
    t = COST_RULES.get("BatchNormalization")(
        "BatchNormalization", (x, c, c, c, c), (x, c, c), {"training_mode": 1}, hw).seconds
    nbytes = 2 * x.size_bytes + 6 * c.size_bytes
    assert t == pytest.approx(1e-5 + 1e-11 * nbytes + 1e-8 * 64 + 1e-9 * 576)
    g = COST_RULES.get("BatchNormGrad")("BatchNormGrad", (x, c, x), (x, c, c), {}, hw).seconds
    assert g == pytest.approx(1e-5 + 1e-11 * (3 * x.size_bytes + 3 * c.size_bytes)
                              + 1e-8 * 64 + 1e-9 * 576)


def test_concat_features() -> None:
    """A concatenation's rows, its length along the axis, the elements after it, its
    parts, whether every part's slice is a multiple of 16 bytes, and whether a part is a
    strided view (the simulator's ``layout.STRIDED_INPUTS``)."""
    from distir.analysis.layout import STRIDED_INPUTS

    pad, big, out = _t(4, 12, 1, 199), _t(4, 12, 397, 199), _t(4, 12, 398, 199)
    got = row_features("Concat", (pad, big), (out,), {"axis": 2}, 1.0)
    assert got == {"bytes": 1.0, "rows": 48.0, "width": 398.0, "inner": 199.0,
                   "parts": 2.0, "aligned": 1.0, "contiguous": 2.0, "rank": 4.0}
    got = row_features("Concat", (pad, big), (out,), {"axis": -2, STRIDED_INPUTS: 1}, 1.0)
    assert got["contiguous"] == 1.0
    channels = row_features("Concat", (_t(8, 96, 56, 56), _t(8, 32, 56, 56)),
                            (_t(8, 128, 56, 56),), {"axis": 1}, 1.0)
    assert (channels["rows"], channels["inner"], channels["aligned"]) == (8.0, 3136.0, 2.0)


CONCAT = FitModel("linear", ("bytes", "contiguous"), intercept=1e-5, coef=(1e-12, -2e-6))
BCAST = FitModel("linear", ("bytes", "where"), intercept=1e-6, coef=(1e-12, 3e-6))


def test_concat_and_broadcast_fits_see_their_features() -> None:
    """A ``concat`` fit prices a concatenation with a part expanded from a scalar (a view
    of stride 0) as not contiguous; an ``elementwise_bcast`` fit tells a ``Where`` of a
    broadcast mask from an add of a broadcast bias; without the families, both are priced
    as before (the elementwise fit by bytes)."""
    text = """
func @main(%x: Tensor[Float32, (4, 12, 397, 199), 0], %y: Tensor[Float32, (4, 12, 1, 199), 0],
           %b: Tensor[Float32, (199,), 0], %m: Tensor[Bool, (199,), 0]) {
  %z = Constant(value=dense<Float32, ()>[0.0], device=0)
  %s = Constant(value=dense<Int64>[4, 12, 1, 199], device=0)
  %zero = Expand(%z, %s)
  %r = Relu(%x)
  %padded = Concat(%zero, %r, axis=2)
  %yr = Relu(%y)
  %plain = Concat(%yr, %r, axis=2)
  %biased = Add(%r, %b)
  %masked = Where(%m, %r, %b)
  return %padded, %plain, %biased, %masked
}"""
    hw = Hardware(**BASE, fits=(("elementwise", "any", EW), ("concat", "Float32", CONCAT),
                                ("elementwise_bcast", "Float32", BCAST)))
    got = _costs(text, hw)
    moved = 4.0 * (4 * 12 * 1 * 199 + 2 * 4 * 12 * 397 * 199 + 4 * 12 * 199)
    assert got["padded"] == pytest.approx(CONCAT({"bytes": moved, "contiguous": 1.0}))
    assert got["plain"] == pytest.approx(CONCAT({"bytes": moved, "contiguous": 2.0}))
    assert got["padded"] > got["plain"]
    assert got["masked"] - got["biased"] == pytest.approx(3e-6, rel=1e-3)
    old = _costs(text, Hardware(**BASE, fits=(("elementwise", "any", EW),)))
    assert old["plain"] == pytest.approx(EW({"bytes": moved}))
