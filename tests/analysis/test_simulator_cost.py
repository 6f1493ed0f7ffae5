"""Cost rules and hardware profiles: coverage, formulas, fitted models, loading."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import pytest

import distir
from distir.analysis.cost import COST_RULES, load_cost_rules
from distir.analysis.hardware import (
    FitModel,
    Hardware,
    LinkSpec,
    available_profiles,
    collective_factors,
    load_hardware,
    loglog_terms,
)
from distir.analysis.simulator import CostFallbackWarning, simulate
from distir.errors import ConfigError, SimulationError
from distir.ir.schemas import SCHEMAS

HW = Hardware(name="t", memory_bytes=1 << 34,
              peak_flops=(("Float32", 1e12), ("Float16", 8e12)), memory_bandwidth=1e11,
              launch_overhead=1e-5, devices_per_node=4,
              intra_node=(LinkSpec(2, 1e10, 1e-6), LinkSpec(4, 5e9, 2e-6)),
              inter_node=(LinkSpec(2, 1e9, 1e-5),))


def one_op(text: str, hw: Hardware = HW) -> float:
    return simulate(distir.parse(text), hw).latency_s


def test_every_op_has_a_cost_rule() -> None:
    load_cost_rules()
    missing = sorted(set(SCHEMAS) - set(COST_RULES.rules))
    assert missing == []


def test_missing_cost_rule_is_an_error_or_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    load_cost_rules()
    monkeypatch.delitem(COST_RULES.rules, "Relu")
    text = "func @main(%x: Tensor[Float32, (4, 4), 0]) {\n  %a = Relu(%x)\n  return %a\n}"
    with pytest.raises(SimulationError, match=r"no cost rule for op 'Relu'.*fallback=True"):
        one_op(text)
    with pytest.warns(CostFallbackWarning, match="Relu"):
        sim = simulate(distir.parse(text), HW, fallback=True)
    assert sim.uncosted_ops == ("Relu",)
    # The documented default: a memory-bound kernel over input and result bytes.
    assert sim.latency_s == pytest.approx(1e-5 + 128 / 1e11)


def test_matmul_roofline() -> None:
    # 2 * 512^3 FLOPs at 1e12 FLOP/s (compute-bound) plus the launch.
    t = one_op("func @main(%a: Tensor[Float32, (512, 512), 0], %b: Tensor[Float32, (512, 512), 0])"
               " {\n  %c = MatMul(%a, %b)\n  return %c\n}")
    assert t == pytest.approx(1e-5 + 2 * 512**3 / 1e12)
    # Float16 uses its own peak.
    t16 = one_op("func @main(%a: Tensor[Float16, (512, 512), 0], "
                 "%b: Tensor[Float16, (512, 512), 0]) {\n  %c = MatMul(%a, %b)\n  return %c\n}")
    assert t16 == pytest.approx(1e-5 + 2 * 512**3 / 8e12)


def test_batched_matmul_and_gradient() -> None:
    # (8, 64, 32) @ (32, 16): batch folded into m = 512.
    t = one_op("func @main(%a: Tensor[Float32, (8, 64, 32), 0], %b: Tensor[Float32, (32, 16), 0])"
               " {\n  %c = MatMul(%a, %b)\n  return %c\n}")
    nbytes = (512 * 32 + 32 * 16 + 512 * 16) * 4
    assert t == pytest.approx(1e-5 + max(2 * 512 * 16 * 32 / 1e12, nbytes / 1e11))
    # MatMulGrad of a (256, 256) @ (256, 256): two compute-bound products.
    g = one_op("""
func @main(%a: Tensor[Float32, (256, 256), 0], %b: Tensor[Float32, (256, 256), 0],
           %dy: Tensor[Float32, (256, 256), 0]) {
  %da, %db = MatMulGrad(%a, %b, %dy)
  return %da, %db
}""")
    assert g == pytest.approx(2 * (1e-5 + 2 * 256**3 / 1e12))
    # A result never used is not computed (as the PyTorch lowering skips it): one product.
    for used in ("_, %db", "%da, %db"):
        one = one_op(f"""
func @main(%a: Tensor[Float32, (256, 256), 0], %b: Tensor[Float32, (256, 256), 0],
           %dy: Tensor[Float32, (256, 256), 0]) {{
  {used} = MatMulGrad(%a, %b, %dy)
  return %db
}}""")
        assert one == pytest.approx(1e-5 + 2 * 256**3 / 1e12)
    assert "MatMulGrad" in COST_RULES.skips_unused


def test_memory_bound_and_views() -> None:
    t = one_op("func @main(%x: Tensor[Float32, (1024, 1024), 0]) {\n  %a = Relu(%x)\n"
               "  %b = Transpose(%a, perm=[1, 0])\n  return %b\n}")
    assert t == pytest.approx(1e-5 + 2 * 4 * 1024 * 1024 / 1e11)


def test_conv_is_an_implicit_gemm() -> None:
    text = """
func @main(%x: Tensor[Float32, (8, 64, 32, 32), 0], %w: Tensor[Float32, (128, 64, 3, 3), 0]) {
  %y = Conv(%x, %w, pads=[1, 1, 1, 1])
  return %y
}"""
    sim = simulate(distir.parse(text), HW)
    cost = sim.events()[0][4][0]
    assert cost.flops == 2 * (8 * 32 * 32) * 128 * (64 * 9)
    assert sim.latency_s == pytest.approx(1e-5 + cost.flops / 1e12)


def test_collectives_alpha_beta() -> None:
    nbytes = 1 << 20
    # Within a node, 2 devices: ring allreduce 2(n-1) steps, 2(n-1)/n of the bytes.
    text = """
func @main(%x: Tensor[Float32, (262144,), 0], %y: Tensor[Float32, (262144,), 1]) {
  %a, %b = MPIAllreduce(%x, %y)
  return %a, %b
}"""
    assert one_op(text) == pytest.approx(1e-5 + 2 * 1e-6 + 1.0 * nbytes / 1e10)
    # Four devices use the 4-device link entry.
    text4 = "func @main(" + ", ".join(
        f"%x{d}: Tensor[Float32, (262144,), {d}]" for d in range(4)) + ") {\n" \
        "  %a, %b, %c, %d = MPIAllreduce(%x0, %x1, %x2, %x3)\n  return %a, %b, %c, %d\n}"
    assert one_op(text4) == pytest.approx(1e-5 + 6 * 2e-6 + 1.5 * nbytes / 5e9)
    # Across nodes (devices 0 and 4 with 4 per node): the inter-node link.
    send = "func @main(%x: Tensor[Float32, (262144,), 0]) {\n  %y = Send(%x, device=4)\n" \
           "  return %y\n}"
    assert one_op(send) == pytest.approx(1e-5 + 1e-5 + nbytes / 1e9)
    # Allgather's message is the concatenation.
    ag = """
func @main(%x: Tensor[Float32, (131072,), 0], %y: Tensor[Float32, (131072,), 1]) {
  %a, %b = MPIAllgather(%x, %y)
  return %a, %b
}"""
    assert one_op(ag) == pytest.approx(1e-5 + 1e-6 + 0.5 * nbytes / 1e10)


def test_collective_factors() -> None:
    assert collective_factors("allreduce", 4) == (6.0, 1.5)
    assert collective_factors("reduce_scatter", 8) == (7.0, 7 / 8)
    assert collective_factors("broadcast", 8) == (7.0, 1.0)
    assert collective_factors("send", 2) == (1.0, 1.0)
    assert collective_factors("allreduce", 1) == (0.0, 0.0)
    with pytest.raises(ConfigError):
        collective_factors("alltoall", 2)


def test_fit_models() -> None:
    lin = FitModel("linear", ("flops", "bytes"), intercept=1e-5, coef=(1e-12, 1e-10))
    assert lin({"flops": 1e9, "bytes": 1e6}) == pytest.approx(1e-5 + 1e-3 + 1e-4)
    pw = FitModel("piecewise", ("bytes",), xs=(1e3, 1e6), ts=(1e-5, 1e-3))
    assert pw({"bytes": 10}) == 1e-5                       # constant below
    assert pw({"bytes": 1e6}) == pytest.approx(1e-3)
    assert pw({"bytes": 2e6}) == pytest.approx(2e-3)       # proportional beyond
    assert pw({"bytes": math.sqrt(1e9)}) == pytest.approx(math.sqrt(1e-8))  # log-log
    # log t = -20 + 0.5 log m + 0.5 log n (+ 0 for the rest): t = e^-20 sqrt(m n).
    coef = [0.0] * len(loglog_terms([0.0, 0.0], 2))
    coef[0] = coef[1] = 0.5
    ll = FitModel("loglog", ("m", "n"), intercept=-20.0, coef=tuple(coef), degree=2,
                  lo=(1.0, 1.0), hi=(1e4, 1e4))
    assert ll({"m": 100, "n": 400}) == pytest.approx(math.exp(-20) * 200)
    # Beyond hi the time grows in proportion.
    assert ll({"m": 2e4, "n": 1e4}) == pytest.approx(math.exp(-20) * 1e4 * 2)
    for m in (lin, pw, ll):
        assert FitModel.from_json(json.loads(json.dumps(m.to_json()))) == m
    with pytest.raises(ConfigError, match="knots"):
        FitModel("piecewise", ("bytes",), xs=(2.0, 1.0), ts=(1.0, 1.0))
    with pytest.raises(ConfigError, match="coefficients"):
        FitModel("loglog", ("m",), coef=(1.0,), degree=2, lo=(1.0,), hi=(2.0,))


def test_fits_replace_the_analytic_formulas() -> None:
    mm = FitModel("linear", ("flops",), intercept=2e-5, coef=(1e-13,))
    ar = FitModel("linear", ("bytes",), intercept=3e-5, coef=(1e-11,))
    ew = FitModel("linear", ("bytes",), intercept=4e-6, coef=(1e-12,))
    hw = Hardware(**{**_fields(HW), "fits": (("matmul", "Float32", mm),
                                             ("allreduce", "2", ar),
                                             ("elementwise", "any", ew))})
    assert hw.matmul_time(100, 100, 100, "Float32", 4) == pytest.approx(2e-5 + 2e6 * 1e-13)
    # No Float16 fit: the roofline.
    assert hw.matmul_time(100, 100, 100, "Float16", 2) == HW.matmul_time(100, 100, 100,
                                                                         "Float16", 2)
    assert hw.comm_time("allreduce", 1e6, [0, 1]) == pytest.approx(3e-5 + 1e-5)
    # Group of 4: the 2-device fit with the bytes scaled by the ring volumes (1.5 / 1.0).
    assert hw.comm_time("allreduce", 1e6, [0, 1, 2, 3]) == pytest.approx(3e-5 + 1.5e-5)
    # Across nodes fits do not apply.
    assert hw.comm_time("allreduce", 1e6, [0, 4]) == HW.comm_time("allreduce", 1e6, [0, 4])
    # Elementwise fit, floored at the launch overhead.
    assert hw.memory_time(1e6, 0.0, "Float32") == pytest.approx(1e-5)
    assert hw.memory_time(1e8, 0.0, "Float32") == pytest.approx(4e-6 + 1e-4)


def _fields(hw: Hardware) -> dict:
    return {f: getattr(hw, f) for f in ("name", "memory_bytes", "peak_flops",
                                         "memory_bandwidth", "launch_overhead",
                                         "devices_per_node", "intra_node", "inter_node")}


def test_load_profiles_by_name_and_path(tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    assert {"h100-sxm", "h100-sxm-datasheet", "dgx2-v100"} <= set(available_profiles())
    assert load_hardware("h100-sxm").calibrated  # on a real H100 (calibration/README.md)
    h100 = load_hardware("h100-sxm-datasheet")
    assert h100.name == "h100-sxm-datasheet" and h100.memory_bytes == 80 * 2**30
    assert h100.peak("BFloat16") == 9.894e14 and h100.peak("Int64") == h100.peak("Float32")
    v100 = load_hardware("dgx2-v100")
    assert v100.devices_per_node == 16 and v100.memory_bytes == 32 * 2**30
    assert not v100.calibrated
    # A path works wherever a name does, and the JSON round-trips.
    p = tmp_path / "mine.json"
    p.write_text(json.dumps({**h100.to_json(), "name": "mine"}))
    mine = load_hardware(str(p))
    assert mine.name == "mine" and mine.peak_flops == h100.peak_flops
    # So does a folder in DISTIR_PROFILE_PATH.
    monkeypatch.setenv("DISTIR_PROFILE_PATH", str(tmp_path))
    assert load_hardware("mine").name == "mine"
    assert "mine" in available_profiles()


def test_a_gzipped_profile_loads_by_path(tmp_path: Path) -> None:
    import gzip

    doc = {**load_hardware("h100-sxm-datasheet").to_json(), "name": "zipped"}
    p = tmp_path / "zipped.json.gz"
    with gzip.open(p, "wt", encoding="utf-8") as f:
        json.dump(doc, f)
    hw = load_hardware(str(p))
    assert hw.name == "zipped" and hw.peak_flops == load_hardware("h100-sxm-datasheet").peak_flops
    bad = tmp_path / "bad.json.gz"
    with gzip.open(bad, "wt", encoding="utf-8") as f:
        f.write("{ not json")
    with pytest.raises(ConfigError, match=r"bad.json.gz:1:3: error: invalid JSON"):
        load_hardware(str(bad))
    # a damaged or truncated archive, or plain text named .gz: one line, not a traceback
    notgz = tmp_path / "plain.json.gz"
    notgz.write_text("{}")
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(p.read_bytes()[:200])
    for f in (notgz, cut):
        with pytest.raises(ConfigError, match=rf"{f.name}: cannot read the hardware profile") \
                as e:
            load_hardware(str(f))
        assert "\n" not in str(e.value)
    # a profile derived from a gzipped base finds it beside itself, from any folder
    sub = tmp_path / "sub"
    sub.mkdir()
    child = {"format": doc["format"], "base": "../zipped.json.gz", "name": "child"}
    (sub / "child.json").write_text(json.dumps(child))
    assert load_hardware(str(sub / "child.json")).peak_flops == hw.peak_flops


def test_profile_errors_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown hardware profile 'nope'; available: .*"
                                          r"dgx2-v100.*h100-sxm") as e:
        load_hardware("nope")
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="does not exist"):
        load_hardware(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json")
    with pytest.raises(ConfigError, match=r"bad.json:1:3: error: invalid JSON"):
        load_hardware(str(bad))
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"format": "something"}))
    with pytest.raises(ConfigError, match="not a distir hardware profile"):
        load_hardware(str(other))
    partial = tmp_path / "partial.json"
    doc = load_hardware("h100-sxm").to_json()
    del doc["device"]["memory_bandwidth"]
    partial.write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match="lacks field 'memory_bandwidth'"):
        load_hardware(str(partial))


def test_shipped_profiles_cite_sources() -> None:
    root = Path(__file__).resolve().parents[2] / "calibration" / "profiles"
    for name in ("dgx2-v100", "h100-sxm"):
        doc = json.loads((root / f"{name}.json").read_text())
        assert "datasheet" in " ".join(doc["comment"]).lower()
        Hardware.from_json(doc)


def test_no_warning_without_fallback() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        simulate(distir.parse("func @main(%x: Tensor[Float32, (4,), 0]) {\n  %a = Exp(%x)\n"
                              "  return %a\n}"), HW)
