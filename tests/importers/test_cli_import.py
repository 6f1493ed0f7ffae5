"""``distir import MODEL.onnx [-o OUT.dir] [--dim NAME=N]``."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import distir
from distir.analysis import execute
from distir.cli import main

F32 = TensorProto.FLOAT


def _save(tmp_path, inits, name="m.onnx"):
    nodes = [helper.make_node("MatMul", ["x", inits[0][0]], ["h"]),
             helper.make_node("Add", ["h", inits[1][0]], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F32, ["batch", 4])],
                          [helper.make_tensor_value_info("y", F32, ["batch", 3])],
                          [numpy_helper.from_array(a, n) for n, a in inits])
    path = tmp_path / name
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]), str(path))
    return path


W = np.arange(12, dtype=np.float32).reshape(4, 3)
B = np.array([1.0, 2.0, 3.0], np.float32)


@pytest.fixture
def onnx_path(tmp_path):
    return _save(tmp_path, [("enc/w:0", W), ("file", B)])  # "file" would clash in np.savez


def test_prints_text_and_says_weights_were_not_written(onnx_path, capsys):
    assert main(["import", str(onnx_path), "--dim", "batch=2"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("// Imported from m.onnx by `distir import`.\nfunc @main(")
    assert '%"enc/w:0": Tensor[Float32, (4, 3), 0]' in out
    assert "%x: Tensor[Float32, (2, 4), 0]" in out
    assert "0.0" not in out.split("{", 1)[1]  # no weight values in the text
    assert err.startswith("note: the values of 2 initializers") and "-o OUT.dir" in err
    assert [p.name for p in distir.parse(out).entry.params] == ["x", "enc/w:0", "file"]


def test_output_writes_text_and_weights_that_load_picks_up(onnx_path, tmp_path, capsys):
    out = tmp_path / "model.dir"
    assert main(["import", str(onnx_path), "-o", str(out), "--dim", "batch=5"]) == 0
    assert capsys.readouterr() == ("", "")
    assert (tmp_path / "model.npz").exists()
    assert "; weights in model.npz." in out.read_text().splitlines()[0]
    m = distir.load(out)
    assert set(m.initializers) == {"enc/w:0", "file"}
    np.testing.assert_array_equal(m.initializers["enc/w:0"], W)
    x = np.ones((5, 4), np.float32)
    (y,) = execute(m.entry, [x])
    np.testing.assert_allclose(y, x @ W + B)


def test_stale_weights_file_is_removed(tmp_path, capsys):
    out = tmp_path / "o.dir"
    (tmp_path / "o.npz").write_bytes(b"stale")
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F32, [2])],
                          [helper.make_tensor_value_info("y", F32, [2])])
    p = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]), str(p))
    assert main(["import", str(p), "-o", str(out)]) == 0
    assert not (tmp_path / "o.npz").exists()
    assert "removed" in capsys.readouterr().err
    assert distir.load(out).initializers == {}


@pytest.mark.parametrize("argv, message", [
    (["--dim", "batch"], r"^error: --dim batch: expected NAME=N"),
    (["--dim", "batch=-2"], r"^error: --dim batch=-2: expected NAME=N"),
    (["--dim", "batch=0"], r"^error: --dim batch=0: expected NAME=N with N a positive"),
    (["--dim", "batch=2", "--dim", "batch=3"], r"--dim batch is given twice"),
    ([], r"unbound symbolic dimension 'batch' \(input 'x', axis 0\).*--dim batch=N"),
    (["--dim", "seq=4", "--dim", "batch=1"], r"dims names 'seq', which no input"),
])
def test_bad_dims(onnx_path, capsys, argv, message):
    assert main(["import", str(onnx_path), *argv]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert re.search(message, err), err


def test_missing_and_bad_files(tmp_path, capsys):
    assert main(["import", str(tmp_path / "nope.onnx")]) == 1
    assert capsys.readouterr().err.strip() == f"error: {tmp_path / 'nope.onnx'}: no such file"
    bad = tmp_path / "bad.onnx"
    bad.write_text("func @main() {\n  return\n}\n")
    assert main(["import", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {bad}: not an ONNX model") and err.count("\n") == 1


def test_unsupported_model(tmp_path, capsys):
    nodes = [helper.make_node("Unique", ["x"], ["a"]), helper.make_node("Unique", ["x"], ["b"]),
             helper.make_node("Relu", ["x"], ["c"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F32, [2])],
                          [helper.make_tensor_value_info("c", F32, [2])])
    p = tmp_path / "nz.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]), str(p))
    assert main(["import", str(p)]) == 1
    err = capsys.readouterr().err
    assert "1 unsupported op type: Unique (2 nodes)" in err and err.count("\n") == 1


def test_bfloat16_weights_round_trip(tmp_path):
    import ml_dtypes

    w = np.array([1.5, -2.0, 3.25], np.float32)
    nodes = [helper.make_node("Cast", ["w"], ["wf"], to=F32),
             helper.make_node("Add", ["x", "wf"], ["y"])]
    wt = helper.make_tensor("w", TensorProto.BFLOAT16, [3], w.tolist())
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F32, [3])],
                          [helper.make_tensor_value_info("y", F32, [3])], [wt])
    p = tmp_path / "bf.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]), str(p))
    assert main(["import", str(p), "-o", str(tmp_path / "bf.dir")]) == 0
    m = distir.load(tmp_path / "bf.dir")
    assert m.initializers["w"].dtype == np.dtype(ml_dtypes.bfloat16)
    (y,) = execute(m.entry, [np.ones(3, np.float32)])
    np.testing.assert_array_equal(y, w + 1)
