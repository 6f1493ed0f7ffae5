"""Cost rules of the products with a transposed operand (``matmul_tn``, ``matmul_nt``: a
weight's ``MatMulGrad``; ``bmm_nt``, ``bmm_tn``: an attention's) and of the repeated-index
scatter-add (``scatter_add_repeated``: ``ScatterND`` adding into its data), on a tiny
made-up profile with hand-computed times; and profiles without these families keep the
older costs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import distir
from distir.analysis.hardware import FitModel, Hardware, LinkSpec, load_hardware
from distir.analysis.simulator import simulate
from distir.errors import ConfigError

BASE = dict(name="t", memory_bytes=1 << 34,
            peak_flops=(("Float32", 1e12), ("Float16", 8e12)), memory_bandwidth=1e11,
            launch_overhead=1e-6, devices_per_node=4,
            intra_node=(LinkSpec(2, 1e10, 1e-6),), inter_node=(LinkSpec(2, 1e9, 1e-5),))
MM = FitModel("linear", ("flops",), intercept=2e-5, coef=(1e-13,))
NT = FitModel("linear", ("flops", "mk"), intercept=3e-5, coef=(2e-13, 1e-11))
TN = FitModel("linear", ("flops", "kn"), intercept=4e-5, coef=(3e-13, 2e-11))
BMM = FitModel("linear", ("flops",), intercept=5e-5, coef=(4e-13,))
EW = FitModel("linear", ("bytes",), intercept=4e-6, coef=(1e-12,))
SCATTER = FitModel("linear", ("bytes",), intercept=6e-6, coef=(2e-12,))
REPEATED = FitModel("linear", ("rows", "width", "table", "updates", "bytes"),
                    intercept=7e-6, coef=(1e-8, 1e-9, 1e-10, 1e-11, 1e-12))
OLD = Hardware(**BASE, fits=(("matmul", "Float16", MM), ("bmm", "Float16", BMM),
                             ("elementwise", "any", EW), ("scatter_add", "any", SCATTER)))
NEW = Hardware(**BASE, fits=(*OLD.fits, ("matmul_nt", "Float16", NT),
                             ("matmul_tn", "Float16", TN),
                             ("scatter_add_repeated", "Float16", REPEATED)))


def _costs(text: str, hw: Hardware) -> dict[str, float]:
    """Seconds per op, by the op's first result name."""
    sim = simulate(distir.parse(text), hw)
    return {op.outputs[0].name: secs for _, secs, _, op, *_ in sim.events()}


# a (2, 64, 32) @ w (32, 48): R = 128 rows, k = 32, n = 48
WEIGHT_GRAD = """
func @main(%a: Tensor[Float16, (2, 64, 32), 0], %w: Tensor[Float16, (32, 48), 0],
           %dy: Tensor[Float16, (2, 64, 48), 0]) {
  %da, %dw = MatMulGrad(%a, %w, %dy)
  return %da, %dw
}"""
R, K, N = 128, 32, 48
# da = dy @ w^T: (R x N) @ (N x K): m = R, n = K, k = N; NT features flops and mk = R * N
T_NT = 3e-5 + 2e-13 * (2.0 * R * K * N) + 1e-11 * (R * N)
# dw = a^T @ dy: (K x R) @ (R x N): m = K, n = N, k = R; TN features flops and kn = R * N
T_TN = 4e-5 + 3e-13 * (2.0 * R * K * N) + 2e-11 * (R * N)
T_MM = 2e-5 + 1e-13 * (2.0 * R * K * N)


def test_weight_gradient_uses_the_layout_fits() -> None:
    assert _costs(WEIGHT_GRAD, NEW)["da"] == pytest.approx(T_NT + T_TN)
    assert _costs(WEIGHT_GRAD, OLD)["da"] == pytest.approx(2 * T_MM)


def test_only_the_used_gradient_is_priced() -> None:
    only_w = WEIGHT_GRAD.replace("return %da, %dw", "return %dw")
    assert _costs(only_w, NEW)["da"] == pytest.approx(T_TN)
    only_a = WEIGHT_GRAD.replace("return %da, %dw", "return %da")
    assert _costs(only_a, NEW)["da"] == pytest.approx(T_NT)


BATCHED = """
func @main(%a: Tensor[Float16, (4, 16, 8), 0], %b: Tensor[Float16, (4, 8, 16), 0],
           %dy: Tensor[Float16, (4, 16, 16), 0]) {
  %da, %db = MatMulGrad(%a, %b, %dy)
  %y = MatMul(%a, %b)
  return %da, %db, %y
}"""
BNT = FitModel("linear", ("flops", "batch"), intercept=6e-5, coef=(5e-13, 1e-7))
BTN = FitModel("linear", ("flops", "mn"), intercept=7e-5, coef=(6e-13, 1e-10))


def test_batched_gradients_use_the_batched_layout_fits() -> None:
    flops = 2.0 * 4 * 16 * 16 * 8  # every product here: batch 4, 16 x 16 x 8 in some order
    # without bmm_nt / bmm_tn: two bmm products, as before
    assert _costs(BATCHED, NEW)["da"] == pytest.approx(2 * (5e-5 + 4e-13 * flops))
    both = Hardware(**BASE, fits=(*NEW.fits, ("bmm_nt", "Float16", BNT),
                                  ("bmm_tn", "Float16", BTN)))
    c = _costs(BATCHED, both)
    # da = dy @ b^T: (16 x 16) @ (16 x 8) per batch; db = a^T @ dy: (8 x 16) @ (16 x 16),
    # whose results hold 4 * 8 * 16 elements
    assert c["da"] == pytest.approx(6e-5 + 5e-13 * flops + 1e-7 * 4
                                    + 7e-5 + 6e-13 * flops + 1e-10 * 4 * 8 * 16)
    # a forward product keeps bmm
    assert c["y"] == pytest.approx(_costs(BATCHED, OLD)["y"])
    assert c["y"] == pytest.approx(5e-5 + 4e-13 * 2.0 * 4 * 16 * 16 * 8)


SCATTER_ADD = """
func @main(%t: Tensor[Float16, (100, 16), 0], %i: Tensor[Int64, (2, 50, 1), 0],
           %u: Tensor[Float16, (2, 50, 16), 0], %t2: Tensor[Float16, (10, 10, 16), 0],
           %i2: Tensor[Int64, (30, 2), 0], %u2: Tensor[Float16, (30, 16), 0]) {
  %s = ScatterND(%t, %i, %u, reduction="add")
  %s2 = ScatterND(%t2, %i2, %u2, reduction="add")
  %p = ScatterND(%t, %i, %u)
  return %s, %s2, %p
}"""


def test_adding_scatter_uses_the_repeated_index_fit() -> None:
    new, old = _costs(SCATTER_ADD, NEW), _costs(SCATTER_ADD, OLD)
    nbytes = 2 * 100 * 16 * 2 + 100 * 8 + 100 * 16 * 2  # data, result; indices; updates
    assert new["s"] == pytest.approx(7e-6 + 1e-8 * 100 + 1e-9 * 16 + 1e-10 * 100
                                     + 1e-11 * 1600 + 1e-12 * nbytes)
    assert old["s"] == pytest.approx(6e-6 + 2e-12 * nbytes)
    # depth-2 indices into a (10, 10, 16) table: 30 rows of width 16 into 100 slices
    nbytes2 = 2 * 1600 * 2 + 30 * 2 * 8 + 30 * 16 * 2
    assert new["s2"] == pytest.approx(7e-6 + 1e-8 * 30 + 1e-9 * 16 + 1e-10 * 100
                                      + 1e-11 * 480 + 1e-12 * nbytes2)
    assert new["p"] == pytest.approx(old["p"])  # a plain ScatterND is a copy


def test_a_dtype_without_its_own_fit_takes_the_same_width_one() -> None:
    bf16 = Hardware(**BASE, fits=(("scatter_add_repeated", "BFloat16", REPEATED),
                                  ("elementwise", "any", EW)))
    feats = {"rows": 1.0, "width": 1.0, "table": 1.0, "updates": 1.0, "bytes": 1.0}
    assert bf16.fitted_kernel_time("scatter_add_repeated", "Float16", feats) == \
        pytest.approx(REPEATED(feats))
    assert bf16.fitted_kernel_time("scatter_add", "Float16", feats) is None
    # the layout families are looked up for the dtype itself, else the matmul fit
    assert NEW.layout_matmul_time("matmul_tn", 4, 4, 4, "Float32", 4) == \
        NEW.matmul_time(4, 4, 4, "Float32", 4)


def test_the_families_round_trip_through_a_profile_file(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(NEW.to_json()), encoding="utf-8")
    back = load_hardware(str(path))
    for fam in ("matmul_tn", "matmul_nt", "scatter_add_repeated"):
        assert back.fit(fam, "Float16") == NEW.fit(fam, "Float16")
    assert _costs(WEIGHT_GRAD, back)["da"] == pytest.approx(T_NT + T_TN)


def test_the_shipped_profiles_fit_the_new_families() -> None:
    """``scatter_add_repeated`` is fitted on the H200 profiles only: the H100 ones were
    measured on the accumulating ``index_put_`` the backend ran until 2026-11-27, and
    dropped (``calibration.splice``) when it became PyTorch's embedding backward."""
    for name, fams in (("h100-sxm", ("matmul_tn", "matmul_nt", "bmm_nt", "bmm_tn")),
                       ("h200-sxm", ("matmul_tn", "matmul_nt", "bmm_nt", "bmm_tn",
                                     "scatter_add_repeated"))):
        hw = load_hardware(name)
        for fam in fams:
            for dt in ("Float16", "BFloat16", "Float32"):
                assert hw.fit(fam, dt) is not None, (name, fam, dt)
    assert load_hardware("h100-sxm").fit("scatter_add_repeated", "Float32") is None
    # profiles without them are unchanged: the analytic dgx2 prices a weight gradient as
    # two plain products
    dgx = load_hardware("dgx2-v100")
    assert dgx.fit("matmul_tn", "Float16") is None
    assert dgx.layout_matmul_time("matmul_tn", 1024, 1024, 8192, "Float16", 2) == \
        dgx.matmul_time(1024, 1024, 8192, "Float16", 2)


def test_an_adding_scatter_of_few_rows_is_a_copy() -> None:
    """One wide row (a ``Gather``'s gradient: the backend's ``index_add``) costs what a
    copy of its bytes does, not the repeated-index fit of the embedding gradient."""
    text = """
func @main(%t: Tensor[Float16, (3, 4096), 0], %i: Tensor[Int64, (1, 1), 0],
           %u: Tensor[Float16, (1, 4096), 0]) {
  %s = ScatterND(%t, %i, %u, reduction="add")
  return %s
}"""
    nbytes = 2 * 3 * 4096 * 2 + 8 + 4096 * 2
    assert _costs(text, NEW)["s"] == pytest.approx(NEW.memory_time(nbytes, 0.0, "Float16"))
    # ... unless the profile fits the backend's index_add (``scatter_add_few``)
    few = FitModel("linear", ("bytes",), intercept=9e-6, coef=(3e-12,))
    hw = Hardware(**BASE, fits=(*NEW.fits, ("scatter_add_few", "Float16", few)))
    assert _costs(text, hw)["s"] == pytest.approx(9e-6 + 3e-12 * nbytes)


def test_a_layout_fit_is_not_used_below_its_measured_domain(tmp_path: Path) -> None:
    """A fit records the range its sizes were measured over (``FitModel.domain``); a layout
    product smaller than that (a pipeline microbatch's few rows) is priced by the matmul
    fit, and the domain survives a profile file."""
    nt = FitModel("linear", ("flops", "mk"), intercept=3e-5, coef=(2e-13, 1e-11),
                  domain=(("m", 2048.0, 65536.0), ("n", 768.0, 8192.0),
                          ("k", 768.0, 8192.0)))
    hw = Hardware(**BASE, fits=(*OLD.fits, ("matmul_nt", "Float16", nt)))
    inside = hw.layout_matmul_time("matmul_nt", 4096, 1024, 1024, "Float16", 2)
    assert inside == pytest.approx(3e-5 + 2e-13 * 2 * 4096 * 1024 * 1024 + 1e-11 * 4096 * 1024)
    assert hw.layout_matmul_time("matmul_nt", 512, 1024, 1024, "Float16", 2) == \
        hw.matmul_time(512, 1024, 1024, "Float16", 2)
    assert not nt.below({"m": 1e6, "n": 768.0}) and nt.below({"m": 512.0})
    path = tmp_path / "d.json"
    path.write_text(json.dumps(hw.to_json()), encoding="utf-8")
    back = load_hardware(str(path))
    assert back.fit("matmul_nt", "Float16").domain == nt.domain
    with pytest.raises(ConfigError, match="domain"):
        FitModel("linear", ("flops",), coef=(1.0,), domain=(("m", 5.0, 1.0),))
