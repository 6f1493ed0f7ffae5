"""``calibration.splice``: some fitted families of a profile replaced or dropped, the rest
kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from calibration.calibrate import dumps_profile
from calibration.splice import main, splice
from distir.analysis.hardware import load_hardware, scatter_features
from distir.errors import ConfigError

PROFILES = Path(__file__).resolve().parents[2] / "calibration" / "profiles"


def _doc(name: str) -> dict:
    return json.loads((PROFILES / f"{name}.json").read_text(encoding="utf-8"))


def test_families_taken_from_another_profile(tmp_path: Path) -> None:
    base, other = _doc("h100-sxm"), _doc("h200-sxm")
    src = tmp_path / "other.json"
    src.write_text(json.dumps(other), encoding="utf-8")
    out = tmp_path / "spliced.json"
    assert main([str(PROFILES / "h100-sxm.json"), "--families", "conv", "layernorm",
                 "--from", str(src), "--note", "a test", "-o", str(out)]) == 0
    got = json.loads(out.read_text(encoding="utf-8"))

    def written(x: object) -> object:  # leaf values to PROFILE_DIGITS digits
        return json.loads(dumps_profile(x))

    assert got["fits"]["conv"] == written(other["fits"]["conv"])
    assert got["fits"]["layernorm"] == written(other["fits"]["layernorm"])
    assert got["fits"]["matmul"] == written(base["fits"]["matmul"])  # the others kept
    assert {k: v for k, v in got.items() if k not in ("fits", "comment")} == \
        {k: v for k, v in base.items() if k not in ("fits", "comment")}
    assert got["comment"][:-1] == base["comment"]
    assert "conv, layernorm taken from h200-sxm" in got["comment"][-1]
    assert got["comment"][-1].endswith(": a test.")
    hw, h200 = load_hardware(out), load_hardware(PROFILES / "h200-sxm.json")
    assert hw.kernel_time("layernorm", 1 << 26, 1 << 24, "Float32") == pytest.approx(
        h200.kernel_time("layernorm", 1 << 26, 1 << 24, "Float32"))


def test_a_family_dropped_falls_back(tmp_path: Path) -> None:
    out = tmp_path / "dropped.json"
    assert main([str(PROFILES / "h200-sxm.json"), "--families", "scatter_add_repeated",
                 "--drop", "-o", str(out)]) == 0
    hw = load_hardware(out)
    feats = scatter_features(8192, 1024, 50257, 4.5e8)
    assert load_hardware(PROFILES / "h200-sxm.json").fitted_kernel_time(
        "scatter_add_repeated", "Float32", feats) is not None
    assert hw.fitted_kernel_time("scatter_add_repeated", "Float32", feats) is None
    assert "scatter_add_repeated dropped" in json.loads(out.read_text())["comment"][-1]


def test_refusals_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(ConfigError, match="fits no 'nope': fit it first"):
        splice(_doc("h100-sxm"), ["nope"], _doc("h200-sxm"), "")
    with pytest.raises(ConfigError, match="fits no 'nope': nothing to drop"):
        splice(_doc("h100-sxm"), ["nope"], None, "")
    assert main([str(tmp_path / "missing.json"), "--families", "conv", "--drop"]) == 2
    err = capsys.readouterr().err.strip()
    assert "missing.json: cannot read the profile" in err and "\n" not in err


def test_one_dtype_taken_the_others_kept(tmp_path: Path) -> None:
    base, other = _doc("h100-sxm"), _doc("h200-sxm")
    src = tmp_path / "other.json"
    src.write_text(json.dumps(other), encoding="utf-8")
    out = tmp_path / "spliced.json"
    assert main([str(PROFILES / "h100-sxm.json"), "--families", "matmul", "--dtypes",
                 "Float32", "--from", str(src), "-o", str(out)]) == 0
    got = json.loads(out.read_text(encoding="utf-8"))["fits"]["matmul"]
    assert got["Float32"] == json.loads(dumps_profile(other["fits"]["matmul"]["Float32"]))
    assert got["BFloat16"] == json.loads(dumps_profile(base["fits"]["matmul"]["BFloat16"])) \
        != json.loads(dumps_profile(other["fits"]["matmul"]["BFloat16"]))
    assert "matmul (Float32 only) taken from h200-sxm" in \
        json.loads(out.read_text())["comment"][-1]
    dropped = splice(base, ["matmul"], None, "", ["Float16"])
    assert "Float16" not in dropped["fits"]["matmul"]
    assert dropped["fits"]["matmul"]["Float32"] == base["fits"]["matmul"]["Float32"]
    with pytest.raises(ConfigError, match="fits no 'matmul' in Float64"):
        splice(base, ["matmul"], other, "", ["Float64"])


def test_profiles_keep_thresholds_and_round_leaf_values() -> None:
    # a threshold lies on a measured feature's value: rounded, it would flip that feature
    tree = [[0, 3.465735912322998, 1, 2, 0.0], [-1, 0.0, 0, 0, 0.012717930820253224],
            [-1, 0.0, 0, 0, -0.008670355181972471]]
    got = json.loads(dumps_profile({"trees": [tree], "coef": [8.163361573000826e-13]}))
    assert got == {"trees": [[[0, 3.465735912322998, 1, 2, 0.0], [-1, 0.0, 0, 0, 0.012717931],
                              [-1, 0.0, 0, 0, -0.0086703552]]],
                   "coef": [8.163361573000826e-13]}
