"""``grid_search.skeleton``: a model file without its large weights, filled again to the
same program."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import distir
from distir.importers.onnx import import_onnx
from grid_search.skeleton import KEEP, fill, main, strip


def _model(path: Path) -> None:
    w = numpy_helper.from_array(np.random.default_rng(0).normal(size=(64, 96))
                                .astype(np.float32), "w")
    big_b = numpy_helper.from_array(np.ones(KEEP + 1, np.float16), "big_half")
    scale = numpy_helper.from_array(np.array(0.125, np.float32), "scale")
    shape = numpy_helper.from_array(np.array([-1, 48, 2], np.int64), "shape")
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]),
         helper.make_node("Mul", ["h", "scale"], ["s"]),
         helper.make_node("Reshape", ["s", "shape"], ["y"]),
         helper.make_node("Cast", ["big_half"], ["c"], to=TensorProto.FLOAT)],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("c", TensorProto.FLOAT, None)],
        [w, big_b, scale, shape])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_strip_and_fill_keep_the_program(tmp_path: Path) -> None:
    src, skel, full = tmp_path / "m.onnx", tmp_path / "m.skel.onnx", tmp_path / "f.onnx"
    _model(src)
    assert strip(str(src), str(skel)) == 2  # w and big_half; the scalar and shape stay
    assert skel.stat().st_size < src.stat().st_size / 4
    kept = {t.name: t for t in onnx.load(skel).graph.initializer}
    assert numpy_helper.to_array(kept["shape"]).tolist() == [-1, 48, 2]
    assert float(numpy_helper.to_array(kept["scale"])) == 0.125
    assert fill(str(skel), str(full)) == 2
    back = onnx.load(full)
    assert not any(p.key == "distir.skeleton" for p in back.metadata_props)
    arrays = {t.name: numpy_helper.to_array(t) for t in back.graph.initializer}
    assert arrays["w"].shape == (64, 96) and arrays["w"].dtype == np.float32
    assert arrays["big_half"].dtype == np.float16 and arrays["big_half"].std() > 0
    a = import_onnx(str(src), dims={"batch": 4}).entry
    b = import_onnx(str(full), dims={"batch": 4}).entry
    assert distir.dumps(a) == distir.dumps(b)
    again = tmp_path / "g.onnx"
    fill(str(skel), str(again))  # the values are a function of the names
    assert again.read_bytes() == full.read_bytes()
    packed, unpacked = tmp_path / "m.skel.onnx.xz", tmp_path / "h.onnx"
    assert strip(str(src), str(packed)) == 2 and packed.read_bytes()[:6] == b"\xfd7zXZ\x00"
    assert fill(str(packed), str(unpacked)) == 2  # an xz skeleton fills alike
    assert unpacked.read_bytes() == full.read_bytes()


def test_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src, skel = tmp_path / "m.onnx", tmp_path / "m.skel.onnx"
    _model(src)
    strip(str(src), str(skel))
    assert main(["strip", str(skel), str(tmp_path / "x.onnx")]) == 1
    assert main(["fill", str(src), str(tmp_path / "x.onnx")]) == 1
    assert main(["fill", str(tmp_path / "missing.onnx"), str(tmp_path / "x.onnx")]) == 1
    (tmp_path / "junk.onnx").write_bytes(b"not a model")
    assert main(["strip", str(tmp_path / "junk.onnx"), str(tmp_path / "x.onnx")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and all(e.startswith("error: ") for e in err)
    assert "already a skeleton" in err[0] and "not a skeleton" in err[1]
    assert main(["strip", str(src), str(tmp_path / "ok.onnx")]) == 0
