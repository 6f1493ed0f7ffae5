"""Cost rules of the calibrated transformer kernels: ``bmm`` (both operands batched),
``softmax``, ``layernorm``, ``gelu`` and the ``copy`` a batch-permuting ``Transpose`` costs;
and the fallback to the older behaviour for profiles without these fits."""

from __future__ import annotations

import pytest

import distir
from distir.analysis.cost.compute import (
    copied_transpose,
    copies_batch_axes,
    only_unit_axes_move,
)
from distir.analysis.hardware import FitModel, Hardware, LinkSpec, bmm_features, load_hardware
from distir.analysis.simulator import simulate

BASE = dict(name="t", memory_bytes=1 << 34,
            peak_flops=(("Float32", 1e12), ("Float16", 8e12)), memory_bandwidth=1e11,
            launch_overhead=1e-5, devices_per_node=4,
            intra_node=(LinkSpec(2, 1e10, 1e-6),), inter_node=(LinkSpec(2, 1e9, 1e-5),))
MM = FitModel("linear", ("flops",), intercept=2e-5, coef=(1e-13,))
BMM = FitModel("linear", ("flops", "mn"), intercept=3e-5, coef=(2e-13, 1e-10))
EW = FitModel("linear", ("bytes",), intercept=4e-6, coef=(1e-12,))
SOFTMAX = FitModel("linear", ("bytes",), intercept=5e-6, coef=(3e-12,))
LAYERNORM = FitModel("linear", ("bytes",), intercept=6e-6, coef=(4e-12,))
GELU = FitModel("linear", ("bytes",), intercept=7e-6, coef=(5e-12,))
COPY = FitModel("linear", ("bytes",), intercept=8e-6, coef=(6e-12,))
OLD = Hardware(**BASE, fits=(("matmul", "Float16", MM), ("elementwise", "any", EW)))
NEW = Hardware(**BASE, fits=(("matmul", "Float16", MM), ("elementwise", "any", EW),
                             ("bmm", "Float16", BMM), ("softmax", "any", SOFTMAX),
                             ("layernorm", "any", LAYERNORM), ("gelu", "any", GELU),
                             ("copy", "any", COPY)))

B, H, T, HD = 2, 4, 256, 64
ATTENTION = f"""
func @main(%q: Tensor[Float16, ({B}, {T}, {H}, {HD}), 0],
           %k: Tensor[Float16, ({B}, {T}, {H}, {HD}), 0],
           %v: Tensor[Float16, ({B}, {T}, {H}, {HD}), 0]) {{
  %qh = Transpose(%q, perm=[0, 2, 1, 3])
  %kh = Transpose(%k, perm=[0, 2, 3, 1])
  %vh = Transpose(%v, perm=[0, 2, 1, 3])
  %s = MatMul(%qh, %kh)
  %p = Softmax(%s, axis=-1)
  %c = MatMul(%p, %vh)
  return %c
}}"""


def _costs(text: str, hw: Hardware) -> dict[str, float]:
    """Seconds per op, by the op's first result name."""
    sim = simulate(distir.parse(text), hw)
    return {op.outputs[0].name: secs for _, secs, _, op, *_ in sim.events()}


def test_which_transposes_copy() -> None:
    assert copies_batch_axes(4, [0, 2, 1, 3]) and copies_batch_axes(4, [0, 2, 3, 1])
    assert copies_batch_axes(3, [1, 0, 2]) and copies_batch_axes(3, None)
    assert not copies_batch_axes(4, [0, 1, 3, 2]) and not copies_batch_axes(4, [0, 1, 2, 3])
    assert not copies_batch_axes(2, [1, 0]) and not copies_batch_axes(2, None)
    assert not copies_batch_axes(3, [0, -1, -2])
    # and the backend's copies: those, and unaligned rows whose last axis moves
    assert copied_transpose((2, 3, 4, 5), 2, [0, 2, 1, 3])
    assert copied_transpose((50257, 1536), 2, [1, 0])      # GPT-2's tied LM head
    assert copied_transpose((1536, 50257), 2, None)        # and its gradient
    assert not copied_transpose((1024, 4096), 2, [1, 0])   # aligned: a free view
    assert copied_transpose((1024, 4100), 2, [1, 0])
    assert not copied_transpose((1024, 4100), 4, [1, 0])
    assert not copied_transpose((8, 3, 5), 2, [0, 1, 2])   # nothing moves
    assert not copied_transpose((7,), 2, None)
    # only axes of length 1 move: a reshape, never a copy
    assert not copied_transpose((1, 512, 768), 4, [1, 0, 2])
    assert not copied_transpose((8, 1, 197, 64), 2, [1, 0, 2, 3])
    assert not copied_transpose((50257, 1), 2, None)
    assert only_unit_axes_move((1, 512, 768), [1, 0, 2])
    assert not only_unit_axes_move((2, 512, 768), [1, 0, 2])
    assert copied_transpose((2, 512, 768), 4, [1, 0, 2])


def test_an_unaligned_2d_transpose_costs_a_copy() -> None:
    costs = _costs("""func @main(%w: Tensor[BFloat16, (50257, 1536), 0],
                                  %v: Tensor[BFloat16, (4096, 1536), 0]) {
  %a = Transpose(%w, perm=[1, 0])
  %b = Transpose(%v, perm=[1, 0])
  return %a, %b
}""", load_hardware("h200-sxm"))
    assert costs["a"] > 0 and costs["b"] == 0


def test_attention_with_the_new_families() -> None:
    c = _costs(ATTENTION, NEW)
    half = B * T * H * HD * 2
    for name in ("qh", "kh", "vh"):
        assert c[name] == pytest.approx(8e-6 + 6e-12 * 2 * half)
    bh = B * H
    scores = BMM(bmm_features(bh, T, T, HD, 2))
    assert scores == pytest.approx(3e-5 + 2e-13 * 2 * bh * T * T * HD + 1e-10 * bh * T * T)
    assert c["s"] == pytest.approx(scores)
    assert c["c"] == pytest.approx(BMM(bmm_features(bh, T, HD, T, 2)))
    assert c["p"] == pytest.approx(5e-6 + 3e-12 * 2 * bh * T * T * 2)


def test_old_profiles_keep_the_old_costs() -> None:
    c = _costs(ATTENTION, OLD)
    bh = B * H
    assert c["qh"] == c["kh"] == c["vh"] == 0.0
    # Batches folded into m of the matmul fit.
    assert c["s"] == pytest.approx(OLD.matmul_time(bh * T, T, HD, "Float16", 2))
    assert c["c"] == pytest.approx(OLD.matmul_time(bh * T, HD, T, "Float16", 2))
    assert c["p"] == pytest.approx(OLD.memory_time(2 * bh * T * T * 2, 5.0 * bh * T * T,
                                                   "Float16"))
    # A shipped profile without the new families (the datasheet profile has no fits)
    # gives the same answers as before.
    hw = load_hardware("h100-sxm-datasheet")
    assert hw.bmm_time(64, 1024, 1024, 128, "Float16", 2) == \
        hw.matmul_time(64 * 1024, 1024, 128, "Float16", 2)
    assert hw.kernel_time("softmax", 1e8, 0.0, "Float16") == hw.memory_time(1e8, 0.0,
                                                                             "Float16")
    # h200-sxm and h100-sxm were calibrated with them: their batched matmuls have their
    # own fit.
    for name in ("h200-sxm", "h100-sxm"):
        cal = load_hardware(name)
        assert cal.bmm_time(64, 1024, 1024, 128, "Float16", 2) != \
            cal.matmul_time(64 * 1024, 1024, 128, "Float16", 2)


def test_layernorm_gelu_and_free_transposes() -> None:
    text = """
func @main(%x: Tensor[Float32, (1024, 1024), 0], %w: Tensor[Float32, (1024,), 0],
           %b: Tensor[Float32, (1024,), 0], %y: Tensor[Float32, (2, 8, 16, 32), 0]) {
  %n = LayerNormalization(%x, %w, %b, axis=-1)
  %g = Gelu(%n)
  %r = Relu(%g)
  %t = Transpose(%r, perm=[1, 0])
  %u = Transpose(%y, perm=[0, 1, 3, 2])
  return %t, %u
}"""
    c = _costs(text, NEW)
    x = 1024 * 1024 * 4
    assert c["n"] == pytest.approx(6e-6 + 4e-12 * (2 * x + 2 * 1024 * 4))
    assert c["g"] == pytest.approx(7e-6 + 5e-12 * 2 * x)
    assert c["r"] == pytest.approx(4e-6 + 1e-12 * 2 * x)  # the elementwise fit
    assert c["t"] == 0.0 and c["u"] == 0.0


def test_batched_matmul_gradient_uses_bmm() -> None:
    text = f"""
func @main(%a: Tensor[Float16, (8, {T}, {HD}), 0], %b: Tensor[Float16, (8, {HD}, {T}), 0],
           %dy: Tensor[Float16, (8, {T}, {T}), 0]) {{
  %da, %db = MatMulGrad(%a, %b, %dy)
  return %da, %db
}}"""
    c = _costs(text, NEW)
    want = BMM(bmm_features(8, T, HD, T, 2)) + BMM(bmm_features(8, HD, T, T, 2))
    assert c["da"] == pytest.approx(want)
    old = _costs(text, OLD)
    assert old["da"] == pytest.approx(OLD.matmul_time(8 * T, HD, T, "Float16", 2)
                                      + OLD.matmul_time(8 * HD, T, T, "Float16", 2))


BCAST16 = FitModel("linear", ("bytes",), intercept=4e-6, coef=(2e-12,))
SOFTMAX16 = FitModel("linear", ("bytes",), intercept=5e-6, coef=(6e-12,))
PER_DTYPE = Hardware(**BASE, fits=(("elementwise", "any", EW),
                                   ("elementwise_bcast", "Float16", BCAST16),
                                   ("softmax", "Float32", SOFTMAX),
                                   ("softmax", "Float16", SOFTMAX16)))
BROADCASTS = """
func @main(%x: Tensor[Float16, (4096, 4096), 0], %b: Tensor[Float16, (4096,), 0],
           %y: Tensor[Float16, (4096, 4096), 0], %m: Tensor[Bool, (4096,), 0],
           %c: Tensor[Float16, (), 0]) {
  %bias = Add(%x, %b)
  %same = Add(%x, %y)
  %scaled = Mul(%x, %c)
  %masked = Where(%m, %c, %x)
  %p = Softmax(%x, axis=-1)
  return %bias, %same, %scaled, %masked, %p
}
"""


def test_broadcast_operands_and_per_dtype_kernel_fits() -> None:
    """An elementwise op with an operand of rank >= 1 broadcast to its result costs the
    profile's ``elementwise_bcast`` fit of its dtype; same-shape operands and 0-d scalars
    the ``elementwise`` fit. Kernel fits are looked up by dtype, the same-width dtype
    next, then ``any``."""
    c = _costs(BROADCASTS, PER_DTYPE)
    n = 4096 * 4096
    assert c["bias"] == pytest.approx(4e-6 + 2e-12 * (2 * n + 4096) * 2)
    assert c["same"] == pytest.approx(4e-6 + 1e-12 * 3 * n * 2)
    assert c["scaled"] == pytest.approx(4e-6 + 1e-12 * (2 * n + 1) * 2)
    assert c["masked"] == pytest.approx(4e-6 + 2e-12 * (4096 + (2 * n + 1) * 2))
    assert c["p"] == pytest.approx(5e-6 + 6e-12 * 2 * n * 2)
    # BFloat16 takes Float16's fit; a dtype without one the pooled, then Float32's.
    assert PER_DTYPE.kernel_time("softmax", 1e6, 0.0, "BFloat16") == \
        PER_DTYPE.kernel_time("softmax", 1e6, 0.0, "Float16")
    assert PER_DTYPE.kernel_time("softmax", 1e6, 0.0, "Float64") == \
        PER_DTYPE.kernel_time("softmax", 1e6, 0.0, "Float32")
    assert PER_DTYPE.has_kernel_fit("elementwise_bcast") and not OLD.has_kernel_fit("softmax")
    # The shipped h100-sxm measured broadcasting kernels: a float16 bias add costs more
    # than a same-shape add moving as many bytes.
    hw = load_hardware("h100-sxm")
    assert hw.kernel_time("elementwise_bcast", 1e8, 0.0, "Float16") > \
        1.5 * hw.memory_time(1e8, 0.0, "Float16")
