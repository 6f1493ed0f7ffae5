"""``distir execute``: random or .npy inputs, the summary table, --json, --out, and
one-line errors for bad inputs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import distir
from distir.analysis import execute, random_inputs
from distir.cli import main

ROOT = Path(__file__).resolve().parents[1]
MLP = str(ROOT / "examples" / "mlp_step.dir")

SMALL = """
func @main(%x: Tensor[Float32, (2, 3), 0], %k: Tensor[Int64, (3,), 0]) {
  %y = Relu(%x)
  %c = Cast(%k, to=Float32)
  %z = Add(%y, %c)
  return %z, %k
}
"""


@pytest.fixture
def small(tmp_path: Path) -> Path:
    p = tmp_path / "small.dir"
    p.write_text(SMALL)
    return p


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = main(["execute", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_table_of_random_inputs(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = _run([MLP, "--seed", "4"], capsys)
    assert rc == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split() == ["#", "name", "shape", "dtype", "min", "max", "mean", "std"]
    assert len(lines) == 4
    want = execute(distir.load(MLP), random_inputs(distir.load(MLP).entry, 4))
    for line, w, name in zip(lines[1:], want, ("w1_new", "w2_new", "w3_new")):
        cells = line.split()
        assert cells[1] == name and cells[-5] == "Float32"
        assert " ".join(cells[2:-5]) == f"({w.shape[0]}, {w.shape[1]})"
        assert [float(c) for c in cells[-4:]] == pytest.approx(
            [w.min(), w.max(), w.mean(), w.std()], rel=1e-5)


def test_json_is_one_object_and_seed_matters(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = _run([MLP, "--json", "--seed", "1"], capsys)
    assert rc == 0 and err == ""
    doc = json.loads(out)
    assert out.count("\n") == 1
    assert doc["seed"] == 1 and doc["inputs"] == "random"
    assert [o["name"] for o in doc["outputs"]] == ["w1_new", "w2_new", "w3_new"]
    assert doc["outputs"][0]["shape"] == [24, 48]
    _, out2, _ = _run([MLP, "--json", "--seed", "2"], capsys)
    assert json.loads(out2)["outputs"][0]["mean"] != doc["outputs"][0]["mean"]


def test_npy_inputs_and_saved_outputs(small: Path, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    k = np.array([10, 20, 30], np.int64)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "k.npy", k)
    out_dir = tmp_path / "outs"
    rc, out, err = _run([str(small), "--inputs", str(tmp_path / "x.npy"),
                         str(tmp_path / "k.npy"), "--out", str(out_dir), "--json"], capsys)
    assert rc == 0 and err == ""
    doc = json.loads(out)
    z = np.maximum(x, 0) + k.astype(np.float32)
    assert doc["outputs"][0] == {"name": "z", "shape": [2, 3], "dtype": "Float32",
                                 "min": float(z.min()), "max": float(z.max()),
                                 "mean": pytest.approx(float(z.mean())),
                                 "std": pytest.approx(float(z.astype(np.float64).std())),
                                 "file": str(out_dir / "out_0_z.npy")}
    assert doc["outputs"][1]["dtype"] == "Int64"
    np.testing.assert_array_equal(np.load(out_dir / "out_0_z.npy"), z)
    np.testing.assert_array_equal(np.load(out_dir / "out_1_k.npy"), k)


def test_wrong_number_of_inputs(small: Path, tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    np.save(tmp_path / "x.npy", np.zeros((2, 3), np.float32))
    rc, out, err = _run([str(small), "--inputs", str(tmp_path / "x.npy")], capsys)
    assert rc == 1 and out == ""
    assert err.count("\n") == 1
    assert "small.dir:2:" in err and "@main takes 2 inputs (%x, %k), 1 given" in err


@pytest.mark.parametrize("bad", [np.zeros((3, 2), np.float32), np.zeros((2, 3), np.float64)])
def test_wrong_shape_or_dtype(small: Path, tmp_path: Path, bad: np.ndarray,
                              capsys: pytest.CaptureFixture[str]) -> None:
    np.save(tmp_path / "x.npy", bad)
    np.save(tmp_path / "k.npy", np.zeros(3, np.int64))
    rc, out, err = _run([str(small), "--inputs", str(tmp_path / "x.npy"),
                         str(tmp_path / "k.npy")], capsys)
    assert rc == 1 and out == "" and err.count("\n") == 1
    assert f"x.npy: %x of @main is declared Tensor[Float32, (2, 3), 0], but the file holds " \
           f"{bad.dtype} of shape {bad.shape}" in err


def test_unreadable_input_file(small: Path, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "x.npy").write_text("not numpy")
    rc, out, err = _run([str(small), "--inputs", str(tmp_path / "x.npy"),
                         str(tmp_path / "missing.npy")], capsys)
    assert rc == 1 and err.count("\n") == 1 and "x.npy: not a readable .npy file" in err
    np.save(tmp_path / "x.npy", np.zeros((2, 3), np.float32))
    rc, out, err = _run([str(small), "--inputs", str(tmp_path / "x.npy"),
                         str(tmp_path / "missing.npy")], capsys)
    assert rc == 1 and err.count("\n") == 1 and "missing.npy" in err


def test_placement_error_through_the_command(tmp_path: Path) -> None:
    p = tmp_path / "bad.dir"
    p.write_text("func @main(%x: Tensor[Float32, (2,), 0], %y: Tensor[Float32, (2,), 1]) {\n"
                 "  %z = Add(%x, %y)\n  return %z\n}\n")
    r = subprocess.run([sys.executable, "-m", "distir", "execute", str(p)],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.strip().endswith("bad.dir:2:8: error: Add: inputs are on devices 0 and 1, "
                                     "but Add runs on one device: move an input with Send first")
    assert r.stderr.count("\n") == 1


def test_summary_of_non_finite_and_empty_outputs() -> None:
    from distir.cli.execute import format_table, summarize

    r = summarize("a", np.array([1.0, np.nan], np.float32))
    assert r["mean"] == "nan" and r["min"] == "nan"
    e = summarize("e", np.zeros((0, 3), np.float32))
    assert e["min"] is None and e["shape"] == [0, 3]
    table = format_table([r, e])
    assert "nan" in table and table.splitlines()[2].split()[-4:] == ["-", "-", "-", "-"]
