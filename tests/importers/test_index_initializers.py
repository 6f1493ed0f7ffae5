"""Small integer initializers (the axes, bounds and shapes the dynamo exporter passes as
initializers) import as ``Constant`` ops; weights stay bound parameters."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import distir
from distir.importers._onnx_graph import SMALL_INDEX_INITIALIZER


def _model() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4), "w")
    shape = numpy_helper.from_array(np.array([2, -1], dtype=np.int64), "shape")
    big = numpy_helper.from_array(np.zeros(SMALL_INDEX_INITIALIZER + 1, np.int64), "big")
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]),
         helper.make_node("Reshape", ["h", "shape"], ["y"]),
         helper.make_node("Identity", ["big"], ["z"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4]),
         helper.make_tensor_value_info("z", TensorProto.INT64, [SMALL_INDEX_INITIALIZER + 1])],
        [w, shape, big])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])


def test_small_int_initializers_are_constants() -> None:
    fn = distir.import_onnx(_model()).entry
    assert [p.name for p in fn.params] == ["x", "w", "big"]
    assert set(fn.initializers) == {"w", "big"}
    const = [op for op in fn.ops if op.op_type == "Constant"]
    assert len(const) == 1 and const[0].outputs[0].name == "shape"
    np.testing.assert_array_equal(const[0].attrs["value"].array, [2, -1])
    x = np.ones((2, 3), np.float32)
    y, _ = distir.execute(fn, [x])
    np.testing.assert_array_equal(y, x @ np.arange(12, dtype=np.float32).reshape(3, 4))
