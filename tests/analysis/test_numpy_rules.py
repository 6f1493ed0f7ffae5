"""The numpy rules of ONNX ops agree with onnx.reference's ReferenceEvaluator on one-node
models, for every ONNX op DistIR knows, with a couple of attribute settings each."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from distir.analysis.numpy_rules.onnx_ops import OWN_KERNELS
from distir.analysis.rules import NUMPY_RULES, full_attrs, load_rules
from distir.errors import ExecutionError
from distir.ir._onnx_schemas import ONNX_SCHEMAS
from distir.ir.types import DenseAttr, DType

load_rules()

_rng = np.random.default_rng(1234)


def f32(*shape: int) -> np.ndarray:
    return _rng.standard_normal(shape).astype(np.float32)


def pos(*shape: int) -> np.ndarray:
    return (np.abs(_rng.standard_normal(shape)) + 0.1).astype(np.float32)


def i64(*values: Any) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def ints(lo: int, hi: int, *shape: int) -> np.ndarray:
    return _rng.integers(lo, hi, shape).astype(np.int64)


def boolean(*shape: int) -> np.ndarray:
    return _rng.integers(0, 2, shape).astype(bool)


def nan_tensor() -> np.ndarray:
    x = f32(3, 4)
    x[0, 1] = np.nan
    return x


# (op, inputs (None = omitted), DistIR attributes, number of results)
C = tuple[str, list[Any], dict[str, Any], int]
UNARY = ["Abs", "Ceil", "Cos", "Erf", "Exp", "Floor", "Neg", "Relu", "Sigmoid", "Sin",
         "Softplus", "Tanh", "Identity"]
CASES: list[C] = [(op, [f32(3, 4)], {}, 1) for op in UNARY] + [
    ("Log", [pos(3, 4)], {}, 1),
    ("Sqrt", [pos(3, 4)], {}, 1),
    ("Reciprocal", [pos(3, 4)], {}, 1),
    ("IsNaN", [nan_tensor()], {}, 1),
    ("Not", [boolean(3, 4)], {}, 1),
    ("LeakyRelu", [f32(3, 4)], {}, 1),
    ("LeakyRelu", [f32(3, 4)], {"alpha": 0.2}, 1),
    ("Add", [f32(3, 4), f32(4)], {}, 1),
    ("Sub", [f32(2, 3, 4), f32(3, 1)], {}, 1),
    ("Mul", [f32(3, 4), f32(3, 4)], {}, 1),
    ("Div", [f32(3, 4), pos(4)], {}, 1),
    ("Add", [ints(-5, 5, 3, 4), ints(-5, 5, 4)], {}, 1),
    ("Pow", [pos(3, 4), f32(3, 4)], {}, 1),
    ("Pow", [pos(3, 4), np.array(2.0, np.float32)], {}, 1),
    ("And", [boolean(3, 4), boolean(4)], {}, 1),
    ("Or", [boolean(3, 4), boolean(3, 4)], {}, 1),
] + [(op, [ints(0, 3, 3, 4), ints(0, 3, 4)], {}, 1)
     for op in ("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual")] + [
    ("Less", [f32(3, 4), f32(3, 4)], {}, 1),
    ("Max", [f32(3, 4), f32(4), f32(3, 1)], {}, 1),
    ("Min", [f32(3, 4), f32(3, 4)], {}, 1),
    ("Sum", [f32(3, 4), f32(4), f32(3, 4)], {}, 1),
    ("Sum", [f32(3, 4)], {}, 1),
    ("ArgMax", [f32(3, 4, 5)], {}, 1),
    ("ArgMax", [f32(3, 4, 5)], {"axis": -1, "keepdims": 0}, 1),
    ("AveragePool", [f32(1, 2, 6, 6)], {"kernel_shape": (2, 2), "strides": (2, 2)}, 1),
    ("AveragePool", [f32(1, 2, 5, 5)],
     {"kernel_shape": (3, 3), "pads": (1, 1, 1, 1), "count_include_pad": 1}, 1),
    ("MaxPool", [f32(1, 2, 7, 7)], {"kernel_shape": (3, 3), "strides": (2, 2)}, 1),
    ("MaxPool", [f32(1, 2, 6, 6)], {"kernel_shape": (2, 2), "pads": (1, 1, 0, 0)}, 2),
    ("BatchNormalization", [f32(2, 3, 4, 4), f32(3), f32(3), f32(3), pos(3)], {}, 1),
    ("BatchNormalization", [f32(2, 3, 4), f32(3), f32(3), f32(3), pos(3)],
     {"epsilon": 1e-3}, 1),
    ("BatchNormalization", [f32(2, 3, 4), f32(3), f32(3), f32(3), pos(3)],
     {"training_mode": 1, "momentum": 0.5}, 3),
    ("Cast", [f32(3, 4) * 10], {"to": DType.Float16}, 1),
    ("Cast", [f32(3, 4) * 10], {"to": DType.Int64}, 1),
    ("Cast", [ints(0, 3, 5)], {"to": DType.Bool}, 1),
    ("Cast", [ints(-9, 9, 5)], {"to": DType.Float32}, 1),
    ("Clip", [f32(3, 4), np.array(-0.5, np.float32), np.array(0.5, np.float32)], {}, 1),
    ("Clip", [f32(3, 4), None, np.array(0.2, np.float32)], {}, 1),
    ("Clip", [f32(3, 4)], {}, 1),
    ("Concat", [f32(2, 3), f32(2, 1), f32(2, 4)], {"axis": 1}, 1),
    ("Concat", [f32(2, 3), f32(1, 3)], {"axis": -2}, 1),
    ("ConstantOfShape", [i64(2, 3)], {}, 1),
    ("ConstantOfShape", [i64(4)], {"value": DenseAttr.from_array(i64(7))}, 1),
    ("Conv", [f32(1, 2, 5, 5), f32(3, 2, 3, 3), f32(3)], {"pads": (1, 1, 1, 1)}, 1),
    ("Conv", [f32(2, 4, 7, 7), f32(4, 2, 3, 3)], {"strides": (2, 2), "group": 2}, 1),
    ("Dropout", [f32(3, 4)], {}, 1),
    ("Dropout", [f32(3, 4), np.array(0.3, np.float32), np.array(False)], {}, 2),
    ("Expand", [f32(3, 1), i64(2, 3, 4)], {}, 1),
    ("Flatten", [f32(2, 3, 4)], {}, 1),
    ("Flatten", [f32(2, 3, 4)], {"axis": 2}, 1),
    ("Gather", [f32(5, 4), np.array([[0, 3], [4, 1]], np.int64)], {}, 1),
    ("Gather", [f32(5, 4), np.array([3, -1], np.int64)], {"axis": 1}, 1),
    ("Gelu", [f32(3, 4)], {}, 1),
    ("Gelu", [f32(3, 4)], {"approximate": "tanh"}, 1),
    ("Gelu", [f32(3, 4).astype(np.float64)], {}, 1),
    ("Gemm", [f32(3, 4), f32(4, 5), f32(5)], {}, 1),
    ("Gemm", [f32(4, 3), f32(5, 4), f32(3, 5)],
     {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0}, 1),
    ("Gemm", [f32(3, 4), f32(4, 5)], {"alpha": 2}, 1),
    ("GlobalAveragePool", [f32(2, 3, 4, 5)], {}, 1),
    ("LRN", [f32(1, 5, 3, 3)], {"size": 3}, 1),
    ("LRN", [f32(1, 4, 3, 3)], {"size": 2, "alpha": 1e-3, "beta": 0.5, "bias": 2.0}, 1),
    ("LayerNormalization", [f32(2, 3, 4), f32(4), f32(4)], {}, 1),
    ("LayerNormalization", [f32(2, 3, 4), f32(3, 4)], {"axis": 1, "epsilon": 1e-3}, 3),
    ("LogSoftmax", [f32(3, 4)], {}, 1),
    ("LogSoftmax", [f32(3, 4)], {"axis": 0}, 1),
    ("Softmax", [f32(2, 3, 4)], {}, 1),
    ("Softmax", [f32(2, 3, 4)], {"axis": 1}, 1),
    ("MatMul", [f32(2, 3, 4), f32(4, 5)], {}, 1),
    ("MatMul", [f32(4), f32(2, 4, 3)], {}, 1),
    ("Range", [np.array(1, np.int64), np.array(10, np.int64), np.array(2, np.int64)], {}, 1),
    ("Range", [np.array(0.5, np.float32), np.array(2.0, np.float32),
               np.array(0.25, np.float32)], {}, 1),
] + [(op, [f32(2, 3, 4), i64(1)], {"keepdims": 0}, 1)
     for op in ("ReduceMax", "ReduceMean", "ReduceSum")] + [
    (op, [f32(2, 3, 4)], {}, 1) for op in ("ReduceMax", "ReduceMean", "ReduceSum")] + [
    ("ReduceSum", [f32(2, 3, 4), i64(0, -1)], {}, 1),
    ("ReduceSum", [f32(2, 3, 4), np.zeros(0, np.int64)], {"noop_with_empty_axes": 1}, 1),
    ("Reshape", [f32(2, 3, 4), i64(-1, 6)], {}, 1),
    ("Reshape", [f32(2, 3, 4), i64(0, 12)], {}, 1),
    ("ScatterND", [f32(4, 4), np.array([[1], [3]], np.int64), f32(2, 4)], {}, 1),
    ("ScatterND", [f32(4, 4), np.array([[1], [1]], np.int64), f32(2, 4)],
     {"reduction": "add"}, 1),
    ("Shape", [f32(2, 3, 4)], {}, 1),
    ("Shape", [f32(2, 3, 4)], {"start": 1, "end": -1}, 1),
    ("Slice", [f32(5, 6), i64(1, 0), i64(4, 6), i64(0, 1), i64(1, 2)], {}, 1),
    ("Slice", [f32(5, 6), i64(1), i64(-1)], {}, 1),
    ("Slice", [f32(5, 6), i64(4), i64(0), i64(1), i64(-2)], {}, 1),
    ("Split", [f32(2, 6)], {"axis": 1, "num_outputs": 2}, 2),
    ("Split", [f32(4, 3), i64(1, 3)], {}, 2),
    ("Squeeze", [f32(2, 1, 3, 1), i64(1)], {}, 1),
    ("Squeeze", [f32(2, 1, 3, 1)], {}, 1),
    ("Tile", [f32(2, 3), i64(2, 1)], {}, 1),
    ("Transpose", [f32(2, 3, 4)], {}, 1),
    ("Transpose", [f32(2, 3, 4)], {"perm": (1, 0, 2)}, 1),
    ("Trilu", [f32(4, 5)], {}, 1),
    ("Trilu", [f32(4, 5), np.array(1, np.int64)], {"upper": 0}, 1),
    ("Unsqueeze", [f32(2, 3), i64(0, 3)], {}, 1),
    ("Where", [boolean(3, 4), f32(3, 4), f32(4)], {}, 1),
    ("Where", [boolean(4), ints(0, 9, 3, 4), ints(0, 9, 1)], {}, 1),
    ("Constant", [], {"value": DenseAttr.from_array(f32(2, 3))}, 1),
    ("Constant", [], {"value_float": 2.5}, 1),
    ("Constant", [], {"value_ints": (1, 2, 3)}, 1),
]

# The ops of exported Hugging Face / torchvision-like models (issue 14).
CASES += [(op, [f32(3, 4)], {}, 1) for op in (
    "HardSwish", "HardSigmoid", "Mish", "Selu", "Elu", "Round", "Atan", "Sign")] + [
    ("HardSigmoid", [f32(3, 4)], {"alpha": 0.3, "beta": 0.4}, 1),
    ("Elu", [f32(3, 4)], {"alpha": 0.5}, 1),
    ("IsInf", [np.array([1.0, np.inf, -np.inf, np.nan], np.float32)], {}, 1),
    ("IsInf", [np.array([1.0, np.inf, -np.inf], np.float32)], {"detect_negative": 0}, 1),
    ("Mod", [ints(-9, 9, 3, 4), np.array([2, -3, 4, 5], np.int64)], {}, 1),
    ("Mod", [f32(3, 4), pos(4)], {"fmod": 1}, 1),
    ("PRelu", [f32(2, 3, 4), f32(3, 1)], {}, 1),
    ("Xor", [boolean(3, 4), boolean(4)], {}, 1),
    ("CastLike", [f32(3, 4), np.zeros(1, np.float16)], {}, 1),
    ("GatherElements", [f32(3, 4), ints(0, 3, 2, 4)], {}, 1),
    ("GatherElements", [f32(3, 4), ints(-4, 4, 3, 2)], {"axis": 1}, 1),
    ("GatherND", [f32(3, 4, 5), ints(0, 3, 2, 2)], {}, 1),
    ("GatherND", [f32(2, 4, 5), ints(0, 4, 2, 1)], {"batch_dims": 1}, 1),
    ("ScatterElements", [f32(3, 4), np.array([[1, 0, 2, 1]], np.int64), f32(1, 4)], {}, 1),
    ("ScatterElements", [f32(3, 4), np.array([[1, 1], [0, 0]], np.int64), f32(2, 2)],
     {"axis": 1, "reduction": "add"}, 1),
    ("OneHot", [i64(0, 2, -1), np.array(4, np.int64), np.array([0.0, 1.0], np.float32)],
     {}, 1),
    ("OneHot", [ints(0, 3, 2, 2), np.array(3, np.int64), i64(-1, 5)], {"axis": 0}, 1),
    ("NonZero", [np.array([[1, 0, 2], [0, 0, 3]], np.int64)], {}, 1),
    ("CumSum", [f32(3, 4), np.array(1, np.int64)], {}, 1),
    ("CumSum", [ints(0, 9, 5), np.array(0, np.int32)], {"exclusive": 1, "reverse": 1}, 1),
    ("TopK", [f32(3, 5), i64(2)], {}, 2),
    ("TopK", [f32(4, 3), i64(3)], {"axis": 0, "largest": 0}, 2),
    ("Einsum", [f32(2, 3, 4), f32(2, 4, 5)], {"equation": "bij,bjk->bik"}, 1),
    ("Einsum", [f32(3, 3)], {"equation": "ii"}, 1),
    ("ArgMin", [f32(3, 4, 5)], {"axis": 1}, 1),
    ("Pad", [f32(2, 3), i64(1, 0, 0, 2)], {}, 1),
    ("Pad", [f32(2, 4), i64(1, 2), None, i64(1)], {"mode": "reflect"}, 1),
    ("Pad", [f32(2, 3), i64(1, 1, 1, 1), np.array(2.5, np.float32)], {"mode": "constant"}, 1),
    ("Resize", [f32(1, 1, 3, 4), None, np.array([1, 1, 2, 2], np.float32)], {}, 1),
    ("Resize", [f32(1, 2, 4, 4), None, None, i64(1, 2, 3, 6)],
     {"mode": "linear", "coordinate_transformation_mode": "align_corners"}, 1),
    ("DepthToSpace", [f32(1, 8, 2, 3)], {"blocksize": 2}, 1),
    ("DepthToSpace", [f32(1, 8, 2, 3)], {"blocksize": 2, "mode": "CRD"}, 1),
    ("SpaceToDepth", [f32(1, 2, 4, 6)], {"blocksize": 2}, 1),
    ("InstanceNormalization", [f32(2, 3, 4, 5), f32(3), f32(3)], {}, 1),
    ("GroupNormalization", [f32(2, 4, 3, 3), f32(4), f32(4)], {"num_groups": 2}, 1),
] + [(op, [f32(2, 3, 4), i64(1)], {"keepdims": 0}, 1) for op in (
    "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp")]
CASES += [(op, [f32(3, 4) * 0.5], {}, 1) for op in (
    "Tan", "Asin", "Acos", "Atanh", "Sinh", "Cosh", "Asinh", "Softsign", "Celu",
    "ThresholdedRelu", "Shrink", "Hardmax", "LpNormalization")] + [
    ("Acosh", [pos(3, 4) + 1], {}, 1),
    ("Celu", [f32(3, 4)], {"alpha": 0.5}, 1),
    ("Shrink", [f32(3, 4)], {"bias": 0.2, "lambd": 0.3}, 1),
    ("LpNormalization", [f32(3, 4)], {"axis": 0}, 1),  # p=1: onnx.reference is wrong
    ("BitwiseNot", [ints(-9, 9, 3, 4)], {}, 1),
    *[(op, [ints(-9, 9, 3, 4), ints(0, 9, 4)], {}, 1)
      for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor")],
    ("Mean", [f32(3, 4), f32(4), f32(3, 1)], {}, 1),
    ("Size", [f32(2, 3, 4)], {}, 1),
    ("GlobalMaxPool", [f32(2, 3, 4, 5)], {}, 1),
    ("ReduceLogSum", [pos(2, 3, 4), i64(1)], {}, 1),
    ("MeanVarianceNormalization", [f32(2, 3, 4, 5)], {}, 1),
    ("ConvTranspose", [f32(1, 2, 3, 3), f32(2, 3, 3, 3)], {"strides": (2, 2)}, 1),
    ("LSTM", [f32(5, 2, 3), f32(1, 16, 3), f32(1, 16, 4)], {"hidden_size": 4}, 3),
    ("GRU", [f32(5, 2, 3), f32(1, 12, 3), f32(1, 12, 4), f32(1, 24)],
     {"linear_before_reset": 1}, 2),
    ("GridSample", [f32(1, 2, 4, 5), f32(1, 3, 6, 2) * 0.8], {}, 1),
    ("Col2Im", [f32(1, 12, 12), i64(5, 4), i64(2, 3)],
     {"dilations": (2, 1), "pads": (1, 0, 0, 1)}, 1),
]

_ONNX_DTYPE = {DType.Float16: TensorProto.FLOAT16, DType.Float32: TensorProto.FLOAT,
               DType.Int64: TensorProto.INT64, DType.Bool: TensorProto.BOOL}


def _onnx_attr(v: Any) -> Any:
    if isinstance(v, DType):
        return _ONNX_DTYPE[v]
    if isinstance(v, DenseAttr):
        return numpy_helper.from_array(np.array(v.array))
    if isinstance(v, tuple):
        return list(v)
    return v


def _reference(op: str, inputs: list[Any], attrs: dict[str, Any], n_out: int) -> list:
    names = ["" if x is None else f"in{i}" for i, x in enumerate(inputs)]
    while names and names[-1] == "":
        names.pop()
    outs = [f"out{i}" for i in range(n_out)]
    node = helper.make_node(op, names, outs, **{k: _onnx_attr(v) for k, v in attrs.items()})
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
         for n, x in zip(names, inputs) if n],
        [helper.make_value_info(o, onnx.TypeProto()) for o in outs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    feeds = {n: x for n, x in zip(names, inputs) if n}
    return ReferenceEvaluator(model).run(None, feeds)


def _ours(op: str, inputs: list[Any], attrs: dict[str, Any], n_out: int) -> tuple:
    return NUMPY_RULES.get(op)(op, tuple(inputs), full_attrs(op, attrs), n_out)


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_matches_reference_evaluator(case: C) -> None:
    op, inputs, attrs, n_out = case
    want = _reference(op, inputs, attrs, n_out)
    got = _ours(op, inputs, attrs, n_out)
    assert len(got) == n_out
    for g, w in zip(got, want):
        assert isinstance(g, np.ndarray)
        w = np.asarray(w)
        assert g.dtype == w.dtype, (op, g.dtype, w.dtype)
        assert g.shape == w.shape
        if op in OWN_KERNELS:  # DistIR's own kernel: equal up to rounding
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_array_equal(g, w)


def test_every_onnx_op_is_covered() -> None:
    assert set(ONNX_SCHEMAS) <= {c[0] for c in CASES}
    assert all(op in NUMPY_RULES for op in ONNX_SCHEMAS)


def test_result_dtypes_follow_onnx_constraints() -> None:
    x16 = f32(3, 4).astype(np.float16)
    for op in ("Softmax", "Gelu", "Relu", "Sigmoid"):
        (y,) = _ours(op, [x16], {}, 1)
        assert y.dtype == np.float16, op
    (s,) = _ours("Shape", [x16], {}, 1)
    assert s.dtype == np.int64
    (e,) = _ours("Equal", [x16, x16], {}, 1)
    assert e.dtype == np.bool_ and e.all()
    (c,) = _ours("Cast", [x16], {"to": DType.BFloat16}, 1)
    assert c.dtype == DType.BFloat16.np


def test_kernels_are_built_once_per_distinct_application() -> None:
    from distir.analysis.numpy_rules.onnx_ops import OnnxKernels

    k = OnnxKernels()
    a = f32(2, 3)
    k.run("Softmax", (a,), {"axis": -1}, 1)
    k.run("Softmax", (f32(4, 5),), {"axis": -1}, 1)
    k.run("Softmax", (a,), {"axis": 0}, 1)
    k.run("Clip", (a, None, np.array(0.0, np.float32)), {}, 1)
    k.run("Clip", (a, np.array(0.0, np.float32), None), {}, 1)
    assert len(k.cache) == 4
    k.run("Gelu", (a,), {"approximate": "none"}, 1)
    k.run("Gelu", (a.astype(np.float64),), {"approximate": "none"}, 1)
    assert "Gelu" in k.context_dependent and len(k.cache) == 6


def test_kernel_failure_is_one_line_execution_error() -> None:
    with pytest.raises(ExecutionError, match=r"^error: the ONNX reference kernel failed on "
                       r"inputs of shapes \[\(2, 3\), \(4, 5\)\]: [^\n]+$"):
        _ours("MatMul", [f32(2, 3), f32(4, 5)], {}, 1)


def test_constant_of_strings_is_unsupported() -> None:
    from distir.errors import UnsupportedError

    with pytest.raises(UnsupportedError, match="strings"):
        _ours("Constant", [], {"value_string": "abc"}, 1)


def test_program_runs_onnx_ops_end_to_end() -> None:
    import distir
    from distir.analysis import execute

    m = distir.parse("""
func @main(%x: Tensor[Float32, (4, 6), 0]) {
  %s = Constant(value=dense<Int64>[2, 12])
  %r = Reshape(%x, %s)
  %a, %b = Split(%r, axis=1, num_outputs=2)
  %c = Clip(%a, _, %b)
  %y = Softmax(%c, axis=0)
  return %y
}
""")
    x = f32(4, 6)
    (y,) = execute(m, [x], check_types=False)
    r = x.reshape(2, 12)
    c = np.minimum(r[:, :6], r[:, 6:])
    e = np.exp(c - c.max(axis=0))
    np.testing.assert_allclose(y, e / e.sum(axis=0), rtol=1e-6)


def test_rule_module_does_not_import_onnx() -> None:
    code = ("import sys, distir.analysis.numpy_rules.onnx_ops; "
            "sys.exit(1 if 'onnx' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


# ------------------------------------------ conformance: ONNX's own backend node test cases

def _distir_attrs(node: Any) -> dict[str, Any] | None:
    """The node's attributes as DistIR values, or None when DistIR cannot hold one."""
    out: dict[str, Any] = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode()
        elif isinstance(v, list):
            if v and isinstance(v[0], bytes):
                return None
            v = tuple(v)
        elif isinstance(v, onnx.TensorProto):
            try:
                v = DenseAttr.from_array(numpy_helper.to_array(v))
            except KeyError:
                return None
        elif not isinstance(v, (int, float, str)):
            return None
        if node.op_type == "Cast" and a.name == "to":
            try:
                v = DType.from_np(helper.tensor_dtype_to_np_dtype(v))
            except KeyError:
                return None
        out[a.name] = v
    return out


def _supported(x: Any) -> bool:
    try:
        DType.from_np(np.asarray(x).dtype)
    except KeyError:
        return False
    return True


def test_onnx_backend_node_cases() -> None:
    """Every single-node case of ``onnx.backend.test.case.node`` for an op DistIR has, on
    dtypes DistIR supports, at opset 21 or a later one (the op versions after 21 of these
    ops only add element types, so on DistIR's dtypes they mean the same)."""
    import warnings

    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases()
    ran: set[str] = set()
    failures: list[str] = []
    for case in cases:
        g = case.model.graph
        if len(g.node) != 1 or g.node[0].domain not in ("", "ai.onnx"):
            continue
        node = g.node[0]
        op = node.op_type
        opset = max(o.version for o in case.model.opset_import if o.domain in ("", "ai.onnx"))
        if op not in ONNX_SCHEMAS or opset < ONNX_SCHEMAS[op]["since"]:
            continue  # an older version of the op
        attrs = _distir_attrs(node)
        known = {a[0] for a in ONNX_SCHEMAS[op]["attrs"]}
        if attrs is None or not set(attrs) <= known:
            continue  # attributes of a newer version
        for inputs, outputs in case.data_sets:
            feeds = dict(zip([i.name for i in g.input], inputs))
            args = [feeds[n] if n else None for n in node.input]
            if not all(a is None or _supported(a) for a in args) or not all(
                    _supported(o) for o in outputs):
                continue
            args = [None if a is None else np.asarray(a) for a in args]
            ran.add(op)
            try:
                got = _ours(op, args, attrs, len(node.output))
                # an omitted result ("" in the node, e.g. LSTM's Y) has no expected value
                got = tuple(g for g, name in zip(got, node.output) if name)
                for gv, want in zip(got, outputs):
                    assert gv.dtype == np.asarray(want).dtype, (gv.dtype, want.dtype)
                    np.testing.assert_allclose(gv.astype(np.float64) if gv.dtype.kind == "f"
                                               else gv, want, rtol=case.rtol, atol=case.atol)
            except Exception as e:  # noqa: BLE001 - collect every failure, report together
                failures.append(f"{case.name}: {type(e).__name__}: "
                                f"{str(e).strip().splitlines()[0] if str(e).strip() else ''}")
    assert not failures, "\n".join(failures)
    assert len(ran) >= 60, sorted(set(ONNX_SCHEMAS) - ran)


def test_average_pool_windows_past_the_padded_input() -> None:
    """``ceil_mode`` keeps a window that reaches past the padded input (HF EfficientNet's
    last pool: a window of 2560 over a 7 x 7 map); onnx.reference averages those wrongly,
    DistIR's kernel as PyTorch (and onnxruntime) does, and the type rule accepts such a
    window where it starts inside the input. Random cases, with and without overhang."""
    import torch
    import torch.nn.functional as F

    from distir.analysis import infer_types
    from tests.backend.test_lowering import one_op

    rng = np.random.default_rng(3)
    overhung = 0
    for _ in range(60):
        h, w = (int(v) for v in rng.integers(3, 9, 2))
        k = int(rng.choice([2, 3, 5, 12, 40]))
        s = int(rng.choice([1, 2, 3, k]))
        p = int(rng.integers(0, k // 2 + 1)) if k < 12 else 0
        cip = int(rng.integers(0, 2))
        x = rng.standard_normal((2, 3, h, w)).astype(np.float32)
        try:
            want = F.avg_pool2d(torch.tensor(x), k, s, p, ceil_mode=True,
                                count_include_pad=bool(cip)).numpy()
        except RuntimeError:
            continue  # PyTorch refuses the case too
        attrs = {"kernel_shape": (k, k), "strides": (s, s), "pads": (p,) * 4, "ceil_mode": 1,
                 "count_include_pad": cip}
        overhung += any(((o - 1) * s + k > d + 2 * p) for o, d in zip(want.shape[2:], (h, w)))
        (got,) = _ours("AveragePool", [x], attrs, 1)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        fn = one_op("AveragePool", [(DType.Float32, x.shape)], **attrs)
        assert infer_types(fn)[0].shape == want.shape
    assert overhung >= 10
