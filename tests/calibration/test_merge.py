"""``calibration.merge``: one profile's compute kernels on another's links and collectives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from calibration.calibrate import dumps_profile
from calibration.merge import main, merge
from distir.analysis.hardware import load_hardware
from distir.errors import ConfigError

PROFILES = Path(__file__).resolve().parents[2] / "calibration" / "profiles"


def _doc(name: str) -> dict:
    return json.loads((PROFILES / f"{name}.json").read_text(encoding="utf-8"))


def test_compute_from_one_links_and_collectives_from_the_other(tmp_path: Path) -> None:
    compute, comm = _doc("h100-sxm"), _doc("h200-sxm")
    out = tmp_path / "mixed.json"
    assert main(["--comm", str(PROFILES / "h200-sxm.json"), "-o", str(out),
                 str(PROFILES / "h100-sxm.json")]) == 0
    got = json.loads(out.read_text(encoding="utf-8"))
    assert got["name"] == "mixed"
    # (as written: leaf values to calibration.calibrate.PROFILE_DIGITS digits)
    assert got["fits"]["matmul"] == json.loads(dumps_profile(compute["fits"]["matmul"]))
    assert got["fits"]["allreduce"] == comm["fits"]["allreduce"]
    assert got["interconnect"] == comm["interconnect"]
    assert got["device"]["peak_flops"] == compute["device"]["peak_flops"]
    assert got["device"]["memory_bytes"] == comm["device"]["memory_bytes"]
    hw, h100, h200 = (load_hardware(p) for p in (out, PROFILES / "h100-sxm.json",
                                                  PROFILES / "h200-sxm.json"))
    for d in ("Float32", "BFloat16"):
        assert hw.kernel_time("layernorm", 1 << 26, 1 << 24, d) == pytest.approx(
            h100.kernel_time("layernorm", 1 << 26, 1 << 24, d))
    assert hw.comm_time("allreduce", 1 << 26, (0, 1, 2, 3)) == pytest.approx(
        h200.comm_time("allreduce", 1 << 26, (0, 1, 2, 3)))


def test_a_profile_without_compute_kernels_is_refused() -> None:
    with pytest.raises(ConfigError, match="fits no compute kernel"):
        merge(_doc("h200-sxm-host"), _doc("h200-sxm"), "x")


def test_an_unreadable_profile_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main([str(tmp_path / "none.json"), "--comm", str(PROFILES / "h200-sxm.json"),
                 "-o", str(tmp_path / "o.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert "cannot read the profile" in err and "\n" not in err
