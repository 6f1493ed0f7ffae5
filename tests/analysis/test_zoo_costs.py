"""Cost rules of the ops exported Hugging Face / torchvision-like models add (issue 14):
a two-operand Einsum costs what the equivalent MatMul costs; Resize's FLOPs follow its
taps; the per-element families cost by their bytes."""

from __future__ import annotations

import pytest

from distir.analysis.cost import COST_RULES, load_cost_rules
from distir.analysis.hardware import Hardware, LinkSpec
from distir.analysis.rules import full_attrs
from distir.ir import DType, TensorType

HW = Hardware(name="t", memory_bytes=1 << 34,
              peak_flops=(("Float32", 1e12), ("Float16", 8e12)), memory_bandwidth=1e11,
              launch_overhead=1e-5, devices_per_node=4,
              intra_node=(LinkSpec(2, 1e10, 1e-6),), inter_node=(LinkSpec(2, 1e9, 1e-5),))
load_cost_rules()


def F(*shape: int) -> TensorType:
    return TensorType(DType.Float32, shape, 0)


def cost(op: str, ins: tuple, outs: tuple, **attrs: object):  # noqa: ANN201
    return COST_RULES.get(op)(op, ins, outs, full_attrs(op, attrs), HW)


@pytest.mark.parametrize("eq, a, b, out, mm", [
    ("bij,bjk->bik", (8, 64, 32), (8, 32, 16), (8, 64, 16), ((8, 64, 32), (8, 32, 16))),
    ("ij,jk->ik", (64, 32), (32, 16), (64, 16), ((64, 32), (32, 16))),
    ("bhqd,bhkd->bhqk", (2, 4, 16, 8), (2, 4, 32, 8), (2, 4, 16, 32),
     ((2, 4, 16, 8), (2, 4, 8, 32))),
    ("...ij,jk->...ik", (3, 64, 32), (32, 16), (3, 64, 16), ((3, 64, 32), (32, 16))),
])
def test_two_operand_einsum_costs_its_matmul(eq: str, a: tuple, b: tuple, out: tuple,
                                             mm: tuple) -> None:
    e = cost("Einsum", (F(*a), F(*b)), (F(*out),), equation=eq)
    m = cost("MatMul", (F(*mm[0]), F(*mm[1])), (F(*out),))
    assert e.flops == m.flops > 0
    assert e.seconds == pytest.approx(m.seconds)


def test_one_operand_einsum_is_memory_bound() -> None:
    c = cost("Einsum", (F(64, 64),), (F(64),), equation="ii->i")
    assert c.flops == 2.0 * 64
    assert c.bytes == 4 * (64 * 64 + 64)


def test_resize_flops_follow_the_taps() -> None:
    x, y = F(1, 3, 8, 8), F(1, 3, 16, 16)
    assert cost("Resize", (x, None, F(4)), (y,), mode="nearest").flops == 0
    lin = cost("Resize", (x, None, F(4)), (y,), mode="linear")
    cub = cost("Resize", (x, None, F(4)), (y,), mode="cubic")
    assert lin.flops == 2 * (2 * 2) * y.numel  # 2 taps on each of 2 axes
    assert cub.flops == 2 * lin.flops
    down = F(1, 3, 4, 4)
    plain = cost("Resize", (x, None, F(4)), (down,), mode="linear")
    wide = cost("Resize", (x, None, F(4)), (down,), mode="linear", antialias=1)
    assert wide.flops == 2 * plain.flops  # a window 1 / scale = 2 times wider
    assert lin.seconds > 0 and lin.bytes == 4 * (x.numel + 4 + y.numel)


@pytest.mark.parametrize("op, flops_per_element", [
    ("HardSwish", 1.0), ("Mish", 8.0), ("ReduceL2", 5.0), ("GatherElements", 0.0),
    ("GroupNormalization", 5.0), ("Pad", 0.0), ("TopK", 5.0),
])
def test_per_element_families(op: str, flops_per_element: float) -> None:
    x = F(4, 8)
    c = cost(op, (x,), (x,))
    assert c.flops == flops_per_element * x.numel
    assert c.bytes == 2 * x.size_bytes and c.seconds > 0


def test_lstm_costs_its_products() -> None:
    t, n, i, h, d = 7, 4, 16, 32, 2
    x, w, r = F(t, n, i), F(d, 4 * h, i), F(d, 4 * h, h)
    outs = (F(t, d, n, h), F(d, n, h), F(d, n, h))
    c = cost("LSTM", (x, w, r), outs, direction="bidirectional")
    assert c.flops == d * (2 * t * n * 4 * h * i + t * 2 * n * 4 * h * h)
    one = cost("LSTM", (x, F(1, 4 * h, i), F(1, 4 * h, h)), outs[:1])
    assert c.seconds > one.seconds > 0
    gru = cost("GRU", (x, F(1, 3 * h, i), F(1, 3 * h, h)), outs[:1])
    assert gru.flops == 2 * t * n * 3 * h * i + t * 2 * n * 3 * h * h


def test_grid_sample_flops_follow_the_taps() -> None:
    x, g, y = F(1, 3, 8, 8), F(1, 5, 6, 2), F(1, 3, 5, 6)
    assert cost("GridSample", (x, g), (y,), mode="nearest").flops == 2 * y.numel
    assert cost("GridSample", (x, g), (y,), mode="linear").flops == 2 * 4 * y.numel
    assert cost("GridSample", (x, g), (y,), mode="cubic").flops == 2 * 16 * y.numel
