"""Type rules agree with ONNX: for each op, over shapes, dtypes and attributes, the rule's
result types equal the shapes and dtypes that ``onnx.reference.ReferenceEvaluator`` computes
on a one-node opset-21 model with random inputs (onnxruntime where the reference departs from
the ONNX spec). Independent of the numpy rules: the type rules are called directly."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from distir.analysis.interpreter import TypeInterpreter  # noqa: E402
from distir.analysis.rules import MIXED_RULES, TYPE_RULES, full_attrs, load_rules  # noqa: E402
from distir.analysis.values import Concrete, type_of  # noqa: E402
from distir.errors import TypeInferenceError  # noqa: E402
from distir.ir import DenseAttr, DType, FunctionBuilder, TensorType, parse  # noqa: E402
from distir.ir._onnx_schemas import ONNX_SCHEMAS  # noqa: E402

load_rules()

DEV = 1  # inputs live on device 1: every result must too
I64_MAX = np.iinfo(np.int64).max
I64_MIN = np.iinfo(np.int64).min


@dataclass
class In:
    """An input: ``shape``/``dtype`` for a random abstract one, or ``value`` for a known one
    (passed to the rule as ``Concrete``)."""

    shape: tuple[int, ...] = ()
    dtype: Any = np.float32
    value: Any = None
    high: int = 3  # random integers lie in [0, high)

    def array(self, rng: np.random.Generator) -> np.ndarray:
        if self.value is not None:
            return np.asarray(self.value)
        dt = np.dtype(self.dtype)
        if dt.kind == "f":
            return rng.standard_normal(self.shape).astype(dt)
        if dt.kind == "b":
            return rng.integers(0, 2, self.shape).astype(bool)
        return rng.integers(0, self.high, self.shape).astype(dt)

    def abstract(self, arr: np.ndarray) -> Any:
        t = TensorType(DType.from_np(arr.dtype), tuple(arr.shape), DEV)
        return Concrete(t, arr) if self.value is not None else t


def K(value: Any, dtype: Any = np.int64) -> In:
    """A known input."""
    return In(value=np.asarray(value, dtype=dtype))


@dataclass
class Case:
    op: str
    inputs: list[In | None]
    attrs: dict[str, Any] = field(default_factory=dict)
    n_out: int = 1
    oracle: str = "reference"
    """Or "ort" (onnxruntime), or "infer" (``onnx.shape_inference``, the spec's own shape
    functions, with known inputs as initializers), where the reference departs from the
    spec."""

    def __str__(self) -> str:
        ins = ",".join("_" if i is None else (f"k{np.asarray(i.value).tolist()}"
                                              if i.value is not None
                                              else f"{i.shape}{np.dtype(i.dtype).name}")
                       for i in self.inputs)
        at = ",".join(f"{k}={v}" for k, v in self.attrs.items())
        return f"{self.op}({ins};{at})".replace(" ", "")


def _onnx_attr(v: Any) -> Any:
    if isinstance(v, DenseAttr):
        return numpy_helper.from_array(np.array(v.array))
    if isinstance(v, DType):
        return helper.np_dtype_to_tensor_dtype(v.np)
    if isinstance(v, tuple):
        return list(v)
    return v


def run_onnx(case: Case, arrays: list[np.ndarray | None]) -> list[np.ndarray]:
    names = ["" if a is None else f"in{i}" for i, a in enumerate(arrays)]
    outs = [f"out{i}" for i in range(case.n_out)]
    attrs = {k: _onnx_attr(v) for k, v in case.attrs.items() if k != "device"}
    node = helper.make_node(case.op, names, outs, **attrs)
    graph_in = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                              a.shape)
                for n, a in zip(names, arrays, strict=False) if a is not None]
    graph = helper.make_graph([node], "g", graph_in,
                              [helper.make_empty_tensor_value_info(o) for o in outs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    feeds = {n: a for n, a in zip(names, arrays, strict=False) if a is not None}
    if case.oracle == "infer":
        known = {n for n, i in zip(names, case.inputs, strict=True)
                 if i is not None and i.value is not None}
        graph = helper.make_graph(
            [node], "g", [v for v in graph_in if v.name not in known],
            graph.output, [numpy_helper.from_array(feeds[n], n) for n in known])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
        out = []
        for o in inferred.graph.output:
            tt = o.type.tensor_type
            out.append(np.empty(tuple(d.dim_value for d in tt.shape.dim),
                                helper.tensor_dtype_to_np_dtype(tt.elem_type)))
        return out
    if case.oracle == "ort":
        import onnxruntime as ort
        model.ir_version = 10
        sess = ort.InferenceSession(model.SerializeToString(),
                                    providers=["CPUExecutionProvider"])
        return sess.run(None, feeds)
    return ReferenceEvaluator(model).run(None, feeds)


def rule_types(case: Case, args: tuple) -> tuple:
    rule = TYPE_RULES.get(case.op)
    assert rule is not None, f"no type rule for {case.op}"
    return tuple(rule(case.op, args, full_attrs(case.op, case.attrs), case.n_out))


def _dense(a: Any, dtype: Any) -> DenseAttr:
    return DenseAttr.from_array(np.asarray(a, dtype=dtype))


F32, F64, F16, I32, I64 = np.float32, np.float64, np.float16, np.int32, np.int64
X = In  # an abstract (random) input

CASES: list[Case] = [
    # --- shape family ---
    Case("Shape", [X((2, 3, 4))]),
    Case("Shape", [X((5,), I64)], {"start": 0}),
    Case("Shape", [X((2, 3, 4, 5), F16)], {"start": 1, "end": -1}),
    Case("Shape", [X((2, 3, 4))], {"start": -2}),
    Case("Shape", [X((2, 3, 4))], {"start": -10, "end": 10}),
    Case("Shape", [X((2, 3, 4))], {"start": 2, "end": 1}),
    Case("Shape", [X((), F64)]),
    Case("Constant", [], {"value": _dense([[1, 2, 3], [4, 5, 6]], F32)}),
    Case("Constant", [], {"value": _dense(7, I64)}),
    Case("Constant", [], {"value": _dense([True, False], bool)}),
    Case("Constant", [], {"value": _dense(np.zeros((70, 70)), F16)}),
    Case("Constant", [], {"value_float": 1.5}),
    Case("Constant", [], {"value_floats": (1.0, 2.0, 3.0)}),
    Case("Constant", [], {"value_int": 3}),
    Case("Constant", [], {"value_ints": (4, -1)}),
    Case("ConstantOfShape", [K([2, 3])]),
    Case("ConstantOfShape", [K([4])], {"value": _dense([7], I64)}),
    Case("ConstantOfShape", [K([0, 3])], {"value": _dense([1.0], F64)}),
    Case("ConstantOfShape", [K(np.zeros(0))]),
    Case("Range", [K(0), K(10), K(3)]),
    Case("Range", [K(10), K(0), K(-3)]),
    Case("Range", [K(5, I32), K(5, I32), K(1, I32)]),
    Case("Range", [K(1.0, F32), K(0.0, F32), K(-0.3, F32)]),
    Case("Range", [K(0.5, F64), K(3.0, F64), K(0.25, F64)]),
    Case("Reshape", [X((2, 3, 4)), K([4, -1])]),
    Case("Reshape", [X((2, 3, 4), I64), K([0, -1])]),
    Case("Reshape", [X((2, 3, 4), F16), K([-1])]),
    Case("Reshape", [X((2, 3, 4)), K([0, 0, 2, 2])]),
    Case("Reshape", [X((4, 128, 12)), K([-1, 12])]),
    Case("Reshape", [X((0, 4)), K([0, 2, 2])], {"allowzero": 1}),
    Case("Reshape", [X((6,), I32), K([1, 2, 1, 3])], {"allowzero": 1}),
    Case("Expand", [X((3, 1)), K([2, 3, 4])]),
    Case("Expand", [X((1,), I64), K([5])]),
    Case("Expand", [X((2, 3)), K([1, 1])]),
    Case("Expand", [X((), F64), K([2, 2])]),
    Case("Concat", [X((2, 3)), X((4, 3))], {"axis": 0}),
    Case("Concat", [X((2, 3), F16), X((2, 5), F16), X((2, 1), F16)], {"axis": -1}),
    Case("Concat", [K([-1]), K([768])], {"axis": 0}),
    Case("Concat", [X((1, 2, 3), I32)], {"axis": 1}),
    Case("Gather", [X((5, 4)), K([0, -1, 2])], {"axis": 0}),
    Case("Gather", [X((5, 4), I64), X((2, 3), I64)], {"axis": 1}),
    Case("Gather", [X((5, 4, 3)), K(-2)], {"axis": -2}),
    Case("Gather", [K([4, 128, 768]), K(2)], {"axis": 0}),
    Case("Gather", [K([4, 128, 768]), K([-1, 0], I32)]),
    Case("Slice", [X((10, 8)), K([1]), K([8])]),
    Case("Slice", [X((10, 8)), K([1]), K([8]), K([1]), K([2])]),
    Case("Slice", [X((10, 8), I64), K([-1]), K([I64_MIN]), K([0]), K([-1])]),
    Case("Slice", [X((10, 8)), K([0]), K([I64_MAX]), K([-1])]),
    Case("Slice", [X((10, 8)), K([-3, 1]), K([-1, 100]), K([0, 1]), K([1, 3])]),
    Case("Slice", [X((10, 8)), K([20]), K([30])]),
    Case("Slice", [X((10, 8), F16), K([9, 7]), K([0, -10]), None, K([-2, -3])]),
    Case("Slice", [X((10, 8)), K([2]), K([1])]),
    Case("Slice", [K([4, 128, 768]), K([0]), K([2])]),
    Case("Squeeze", [X((1, 3, 1, 5))]),
    Case("Squeeze", [X((1, 3, 1, 5)), K([0])]),
    Case("Squeeze", [X((1, 3, 1, 5), I64), K([-2, 0])]),
    Case("Squeeze", [K([7]), K([0])]),
    Case("Unsqueeze", [X((3, 4)), K([0])]),
    Case("Unsqueeze", [X((3, 4)), K([0, 3])]),
    Case("Unsqueeze", [X((3, 4), F64), K([-1])]),
    Case("Unsqueeze", [K(5), K([0])]),
    Case("Split", [X((6, 4))], {"num_outputs": 3}, n_out=3),
    Case("Split", [X((7, 4))], {"num_outputs": 3}, n_out=3),
    Case("Split", [X((3, 6), I64), K([2, 4])], {"axis": 1}, n_out=2),
    Case("Split", [X((3, 6)), K([1, 0, 5])], {"axis": -1}, n_out=3),
    Case("Split", [X((2, 8))], {"axis": 1}, n_out=4),
    Case("Transpose", [X((2, 3, 4))]),
    Case("Transpose", [X((2, 3, 4), I32)], {"perm": (1, 0, 2)}),
    Case("Transpose", [X((2, 3, 4, 5))], {"perm": (0, 2, 1, 3)}),
    Case("Flatten", [X((2, 3, 4))], {"axis": 0}),
    Case("Flatten", [X((2, 3, 4))]),
    Case("Flatten", [X((2, 3, 4), I64)], {"axis": 3}),
    Case("Flatten", [X((2, 3, 4))], {"axis": -1}),
    Case("Tile", [X((2, 3)), K([2, 1])]),
    Case("Tile", [X((3,), I64), K([4])]),
    Case("Tile", [X((2, 3)), K([0, 2])]),
    Case("Trilu", [X((3, 4))]),
    Case("Trilu", [X((3, 4)), K(1)], {"upper": 0}),
    Case("Trilu", [X((2, 3, 3), I64), K(-1)]),
    Case("ScatterND", [X((4, 5)), K([[0], [2]]), X((2, 5))]),
    Case("ScatterND", [X((2, 3, 4)), K([[0, 1], [1, 2]]), X((2, 4))]),
    Case("ScatterND", [X((2, 3), I64), K([[1, 2]]), X((1,), I64)], {"reduction": "add"}),
    Case("ArgMax", [X((3, 4, 5))], {"axis": 1}),
    Case("ArgMax", [X((3, 4, 5))], {"axis": -1, "keepdims": 0}),
    Case("ArgMax", [X((6,), I32)], {"keepdims": 0}),
    # --- nn family ---
    Case("MatMul", [X((16, 64)), X((64, 8))]),
    Case("MatMul", [X((64,)), X((64, 8))]),
    Case("MatMul", [X((16, 64), F64), X((64,), F64)]),
    Case("MatMul", [X((64,)), X((64,))]),
    Case("MatMul", [X((2, 1, 3, 4)), X((5, 4, 6))]),
    Case("MatMul", [X((3, 4), I64), X((2, 4, 5), I64)]),
    Case("MatMul", [X((7,), F16), X((2, 7, 3), F16)]),
    Case("Gemm", [X((3, 4)), X((4, 5))]),
    Case("Gemm", [X((4, 3)), X((4, 5)), X((5,))], {"transA": 1}),
    Case("Gemm", [X((3, 4)), X((5, 4)), X((3, 1))], {"transB": 1, "alpha": 0.5}),
    Case("Gemm", [X((4, 3), F64), X((5, 4), F64), X((3, 5), F64)],
         {"transA": 1, "transB": 1, "beta": 2.0}),
    Case("Gemm", [X((3, 4)), X((4, 5)), X((), F32)]),
    Case("Conv", [X((1, 3, 8, 8)), X((4, 3, 3, 3))]),
    Case("Conv", [X((2, 3, 8, 8)), X((4, 3, 3, 3)), X((4,))], {"pads": (1, 1, 1, 1)}),
    Case("Conv", [X((1, 3, 9, 9)), X((4, 3, 3, 3))], {"strides": (2, 2), "pads": (0, 1, 2, 1)}),
    Case("Conv", [X((1, 3, 12, 12)), X((4, 3, 3, 3))], {"dilations": (2, 3)}),
    Case("Conv", [X((1, 6, 8, 8)), X((6, 2, 3, 3))], {"group": 3}),
    Case("Conv", [X((1, 3, 9, 10)), X((4, 3, 3, 3))],
         {"auto_pad": "SAME_UPPER", "strides": (2, 2)}),
    Case("Conv", [X((1, 3, 9, 10)), X((4, 3, 2, 2))],
         {"auto_pad": "SAME_LOWER", "strides": (2, 3)}),
    Case("Conv", [X((1, 3, 9, 10)), X((4, 3, 3, 3))], {"auto_pad": "VALID", "strides": (2, 2)}),
    Case("Conv", [X((2, 4, 10), F64), X((3, 4, 3), F64)], {"kernel_shape": (3,)}),
    Case("MaxPool", [X((1, 2, 7, 7))], {"kernel_shape": (3, 3)}),
    Case("MaxPool", [X((1, 2, 7, 7))], {"kernel_shape": (3, 3), "strides": (2, 2)}),
    Case("MaxPool", [X((1, 2, 8, 8))], {"kernel_shape": (3, 3), "strides": (2, 2), "ceil_mode": 1}),
    Case("MaxPool", [X((1, 2, 6, 6))],
         {"kernel_shape": (2, 2), "strides": (2, 2), "pads": (1, 1, 1, 1), "ceil_mode": 1}),
    Case("MaxPool", [X((1, 2, 9, 9))], {"kernel_shape": (2, 2), "dilations": (2, 2)}),
    Case("MaxPool", [X((2, 3, 9, 9))], {"kernel_shape": (3, 3), "auto_pad": "SAME_UPPER",
                                        "strides": (2, 2)}),
    Case("MaxPool", [X((2, 3, 9, 9))], {"kernel_shape": (3, 3), "auto_pad": "VALID",
                                        "strides": (2, 2)}),
    Case("MaxPool", [X((1, 2, 7, 7))], {"kernel_shape": (3, 3), "pads": (1, 1, 1, 1)}, n_out=2),
    Case("MaxPool", [X((1, 2, 11))], {"kernel_shape": (3,), "strides": (3,), "ceil_mode": 1}),
    Case("AveragePool", [X((1, 2, 7, 7))], {"kernel_shape": (3, 3)}),
    Case("AveragePool", [X((1, 2, 8, 8), F64)],
         {"kernel_shape": (3, 3), "strides": (2, 2), "ceil_mode": 1, "count_include_pad": 1}),
    Case("AveragePool", [X((1, 2, 7, 7))], {"kernel_shape": (2, 2), "pads": (1, 0, 1, 0)}),
    Case("AveragePool", [X((1, 2, 9, 10))], {"kernel_shape": (3, 2), "auto_pad": "SAME_LOWER",
                                             "strides": (2, 2)}),
    Case("AveragePool", [X((1, 2, 9, 9))], {"kernel_shape": (2, 2), "dilations": (2, 2)}),
    Case("GlobalAveragePool", [X((2, 3, 5, 5))]),
    Case("GlobalAveragePool", [X((2, 3, 7), F64)]),
    Case("BatchNormalization", [X((2, 3, 4, 4)), X((3,)), X((3,)), X((3,)), K([1.0] * 3, F32)]),
    Case("BatchNormalization", [X((2, 3, 4, 4)), X((3,)), X((3,)), X((3,)), K([1.0] * 3, F32)],
         {"training_mode": 1}, n_out=3),
    Case("BatchNormalization", [X((4, 5), F64), X((5,), F64), X((5,), F64), X((5,), F64),
                                K([2.0] * 5, F64)]),
    Case("LayerNormalization", [X((2, 3, 4)), X((4,))]),
    Case("LayerNormalization", [X((2, 3, 4)), X((3, 4)), X((3, 4))], {"axis": 1}, n_out=3),
    # The reference gives the statistics X's dtype; the spec (and onnxruntime) stash_type's.
    Case("LayerNormalization", [X((2, 3, 4), F64), X((4,), F64), X((4,), F64)], n_out=3,
         oracle="ort"),
    Case("LayerNormalization", [X((2, 3, 4), F16), X((4,), F16)], n_out=3, oracle="ort"),
    Case("LRN", [X((2, 5, 4, 4))], {"size": 3}),
    Case("LRN", [X((1, 4, 6, 3), F64)], {"size": 2, "alpha": 0.001}),
    Case("Softmax", [X((2, 3))]),
    Case("Softmax", [X((2, 3, 4), F64)], {"axis": 1}),
    Case("LogSoftmax", [X((2, 3))], {"axis": 0}),
    Case("LogSoftmax", [X((5,), F16)]),
    *[Case(op, ins, attrs) for op in ("ReduceMean", "ReduceSum", "ReduceMax") for ins, attrs in [
        ([X((2, 3, 4)), K([1])], {}),
        ([X((2, 3, 4)), K([1])], {"keepdims": 0}),
        ([X((2, 3, 4))], {}),
        ([X((2, 3, 4), F64)], {"keepdims": 0}),
        ([X((2, 3, 4)), K(np.zeros(0))], {"noop_with_empty_axes": 1}),
        ([X((2, 3, 4)), K(np.zeros(0))], {"keepdims": 0}),
        ([X((2, 3, 4), I64), K([-1, 0])], {"keepdims": 0}),
    ]],
    # --- elementwise family ---
    Case("Add", [X((2, 1, 4)), X((3, 1))]),
    Case("Mul", [X((4,), I64), X((), I64)]),
    Case("Div", [K(768), K(12)]),
    Case("Pow", [X((3, 4)), X((), F64)]),
    Case("Sum", [X((2, 3)), X((3,)), X((1, 3))]),
    Case("Max", [X((5, 1), I32), X((4,), I32)]),
    Case("Equal", [X((2, 3), I64), X((3,), I64)]),
    Case("Less", [X((2, 3)), X((2, 1))]),
    Case("Not", [X((2, 3), bool)]),
    Case("And", [X((2, 3), bool), X((3,), bool)]),
    Case("Where", [X((2, 1), bool), X((3,)), X((2, 3))]),
    Case("Cast", [X((2, 3))], {"to": DType.Float16}),
    Case("Cast", [X((2, 3), I64)], {"to": DType.Float32}),
    Case("Relu", [X((2, 3))]),
    Case("Gelu", [X((2, 3))], {"approximate": "tanh"}),
    Case("Clip", [X((4, 4)), K(-1.0, F32), K(1.0, F32)]),
    Case("IsNaN", [X((3,))]),
    Case("Identity", [X((2, 2), I32)]),
    Case("Dropout", [X((3, 4))], n_out=2),
    Case("LeakyRelu", [X((3, 4))], {"alpha": 0.2}),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_rule_agrees_with_onnx(case: Case) -> None:
    rng = np.random.default_rng(0)
    arrays = [None if i is None else i.array(rng) for i in case.inputs]
    args = tuple(None if i is None else i.abstract(a)
                 for i, a in zip(case.inputs, arrays, strict=False))
    attrs = dict(case.attrs)
    if not case.inputs:
        attrs["device"] = DEV
    got = rule_types(Case(case.op, case.inputs, attrs, case.n_out), args)
    want = run_onnx(case, arrays)
    assert len(got) == len(want)
    for t, w in zip(got, want, strict=False):
        w = np.asarray(w)
        assert isinstance(t, TensorType), t
        assert (t.shape, t.dtype, t.device) == (w.shape, DType.from_np(w.dtype), DEV)

    mixed = MIXED_RULES.get(case.op)
    if mixed is not None:  # a mixed rule agrees with the type rule, and its values with ONNX
        res = mixed(case.op, args, full_attrs(case.op, attrs), case.n_out)
        assert tuple(type_of(r) for r in res) == got
        for r, w in zip(res, want, strict=False):
            if isinstance(r, Concrete):
                np.testing.assert_array_equal(r.value, w)


def test_every_onnx_op_has_a_type_rule() -> None:
    missing = sorted(op for op in ONNX_SCHEMAS if op not in TYPE_RULES)
    assert missing == []


def test_mixed_shape_is_concrete_from_an_abstract_input() -> None:
    t = TensorType(DType.Float32, (4, 128, 768), 2)
    (s,) = MIXED_RULES.get("Shape")("Shape", (t,), {"start": 1}, 1)
    assert isinstance(s, Concrete)
    assert s.type == TensorType(DType.Int64, (2,), 2)
    assert s.value.tolist() == [128, 768]


def test_large_constant_stays_abstract() -> None:
    big = DenseAttr.from_array(np.zeros((100, 100), np.float32))
    (c,) = MIXED_RULES.get("Constant")("Constant", (), full_attrs("Constant", {"value": big}), 1)
    assert c == TensorType(DType.Float32, (100, 100), 0)


# --- Spec cases where onnx.reference departs from the ONNX spec: onnxruntime is the oracle ---

ORT_CASES = [
    # A negative step with a start below -dim clamps to 0 (the reference uses Python slicing).
    Case("Slice", [X((10, 4)), K([-20]), K([I64_MIN]), K([0]), K([-1])], oracle="ort"),
    Case("Slice", [X((10, 4)), K([-20]), K([-30]), K([0]), K([-1])], oracle="ort"),
    # VALID pooling counts the dilated window (the reference ignores dilations there).
    Case("MaxPool", [X((1, 2, 9, 9))],
         {"kernel_shape": (2, 2), "dilations": (2, 2), "auto_pad": "VALID"}, oracle="ort"),
    Case("Conv", [X((1, 3, 12, 12)), X((4, 3, 3, 3))],
         {"dilations": (2, 2), "auto_pad": "VALID", "strides": (2, 1)}, oracle="ort"),
]


@pytest.mark.parametrize("case", ORT_CASES, ids=str)
def test_rule_agrees_with_onnxruntime(case: Case) -> None:
    test_rule_agrees_with_onnx(case)


# --- Errors: one line, what was expected and what was found -----------------------------------

def _one_op(op: str, ins: list[Any], attrs: dict[str, Any] | None = None, n_out: int = 1,
            ) -> Any:
    """Infer a one-op function whose inputs are TensorTypes (params) or arrays (Constants)."""
    b = FunctionBuilder("f")
    vals = []
    for i, x in enumerate(ins):
        if x is None:
            vals.append(None)
        elif isinstance(x, TensorType):
            vals.append(b.param(f"p{i}", x))
        else:
            vals.append(b.op("Constant", value=np.asarray(x), name=f"c{i}"))
    outs = b.op(op, *vals, num_results=n_out, **(attrs or {}))
    fn = b.ret(*(outs if isinstance(outs, tuple) else (outs,)))
    return TypeInterpreter().run(fn, [p.type for p in fn.params])


def T(*shape: int, dt: DType = DType.Float32, dev: int = 0) -> TensorType:
    return TensorType(dt, shape, dev)


ERRORS = [
    ("MatMul", [T(16, 64), T(32, 8)], {}, 1,
     r"inner dimensions differ: \(16, 64\) @ \(32, 8\)"),
    ("MatMul", [T(2, 3, 4), T(5, 4, 6)], {}, 1, r"batch dimensions do not broadcast"),
    ("MatMul", [T(3, 4), T(4, 5, dt=DType.Float16)], {}, 1,
     r"one dtype, got Float32 and Float16"),
    ("Gemm", [T(3, 4), T(5, 4)], {}, 1, r"inner dimensions differ: \(3, 4\) @ \(5, 4\)"),
    ("Gemm", [T(3, 4), T(4, 5), T(4, 5)], {}, 1, r"C of shape \(4, 5\) does not broadcast"),
    ("Reshape", [T(2, 3, 4), np.array([5, -1])], {}, 1,
     r"cannot reshape \(2, 3, 4\) \(24 elements\) to \(5, -1\)"),
    ("Reshape", [T(2, 3, 4), np.array([5, 5])], {}, 1, r"to \(5, 5\) \(25 elements\)"),
    ("Reshape", [T(2, 3, 4), np.array([-1, -1])], {}, 1, r"more than one -1"),
    ("Reshape", [T(2, 3), np.array([0, 0, 0])], {}, 1, r"copies dimension 2"),
    ("Reshape", [T(2, 3, 4), np.array([2.0, 12.0], np.float32)], {}, 1,
     r"must be a 1-D Int64 tensor"),
    ("Concat", [T(2, 3), T(2, 4)], {"axis": 0}, 1,
     r"input 1 has shape \(2, 4\), input 0 has \(2, 3\): they must agree except on axis 0"),
    ("Concat", [T(2, 3), T(2, 3)], {"axis": 2}, 1, r"axis 2 is out of range for rank 2"),
    ("Gather", [T(5, 4), np.array([0, 5])], {"axis": 0}, 1,
     r"index 5 is out of range for axis 0 of size 5"),
    ("Gather", [T(5, 4), np.array([-6])], {"axis": 0}, 1, r"index -6 is out of range"),
    ("Gather", [T(5, 4), np.array([0.0])], {}, 1, r"indices must be Int32 or Int64"),
    ("Squeeze", [T(1, 3), np.array([1])], {}, 1, r"cannot squeeze axis 1 of size 3"),
    ("Unsqueeze", [T(3), np.array([0, 0])], {}, 1, r"repeat an axis"),
    ("Split", [T(6, 4), np.array([2, 2])], {}, 2, r"split sizes \[2, 2\] must .* add up to 6"),
    ("Split", [T(5, 4)], {"num_outputs": 4}, 4, r"cannot split a dimension of size 5 into 4"),
    ("Slice", [T(5, 4), np.array([0]), np.array([2]), None, np.array([0])], {}, 1,
     r"the step of axis 0 is 0"),
    ("Slice", [T(5, 4), np.array([0, 1]), np.array([2])], {}, 1, r"differ in length"),
    ("Transpose", [T(2, 3, 4)], {"perm": (0, 0, 1)}, 1, r"not a permutation"),
    ("Expand", [T(3, 4), np.array([5])], {}, 1, r"cannot expand \(3, 4\) to \(5,\)"),
    ("Tile", [T(3, 4), np.array([2])], {}, 1, r"one entry per axis"),
    ("ConstantOfShape", [np.array([2, -1])], {}, 1, r"negative dimension"),
    ("Range", [np.array(0), np.array(5), np.array(0)], {}, 1, r"delta must not be 0"),
    ("ScatterND", [T(4, 5), np.array([[0], [1]]), T(2, 4)], {}, 1,
     r"updates must have shape \(2, 5\)"),
    ("Conv", [T(1, 3, 8, 8), T(4, 2, 3, 3)], {}, 1, r"channels do not match"),
    ("Conv", [T(1, 3, 2, 2), T(4, 3, 3, 3)], {}, 1, r"larger than the padded input"),
    ("Conv", [T(1, 3, 8, 8), T(4, 3, 3, 3)], {"pads": (1, 1)}, 1, r"pads \[1, 1\] must have 4"),
    ("MaxPool", [T(1, 3, 8, 8)], {"kernel_shape": (3,)}, 1, r"one entry per spatial axis"),
    ("AveragePool", [T(1, 3, 8, 8)], {"kernel_shape": (2, 2), "auto_pad": "SAME"}, 1,
     r"auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, got 'SAME'"),
    ("BatchNormalization", [T(2, 3, 4), T(4), T(3), T(3), T(3)], {}, 1,
     r"scale must have shape \(3,\)"),
    ("BatchNormalization", [T(2, 3), T(3), T(3), T(3), T(3)], {}, 3, r"has one result unless"),
    ("LayerNormalization", [T(2, 3, 4), T(3)], {}, 1, r"Scale of shape \(3,\) does not broadcast"),
    ("Softmax", [T(2, 3)], {"axis": 2}, 1, r"axis 2 is out of range for rank 2"),
    ("ReduceSum", [T(2, 3), np.array([2])], {}, 1, r"axes 2 is out of range for rank 2"),
    ("Flatten", [T(2, 3)], {"axis": 3}, 1, r"axis 3 is out of range for rank 2"),
    ("Add", [T(2, 3), T(4)], {}, 1, r"shapes \(2, 3\), \(4,\) do not broadcast"),
    ("Not", [T(2)], {}, 1, r"needs a Bool tensor, got Float32"),
]


@pytest.mark.parametrize("op,ins,attrs,n_out,pattern", ERRORS,
                         ids=[f"{e[0]}-{i}" for i, e in enumerate(ERRORS)])
def test_error_message(op: str, ins: list[Any], attrs: dict[str, Any], n_out: int,
                       pattern: str) -> None:
    with pytest.raises(TypeInferenceError, match=pattern) as ei:
        _one_op(op, ins, attrs, n_out)
    msg = str(ei.value)
    assert "\n" not in msg and f"{op}(" in msg  # one line, naming the op


def test_abstract_shape_input_is_a_clear_error() -> None:
    with pytest.raises(TypeInferenceError,
                       match=r"Reshape\(%p0, %p1\)`: the shape input must be known to infer "
                             r"the result shape, but it is computed from abstract values"):
        _one_op("Reshape", [T(2, 3), T(2, dt=DType.Int64)])


def test_error_in_a_file_names_the_place_and_the_op() -> None:
    m = parse("func @main(%a: Tensor[Float32, (16, 64), 0], %b: Tensor[Float32, (32, 8), 0]) {\n"
              "  %c = MatMul(%a, %b)\n  return %c\n}\n", "mm.dir")
    with pytest.raises(TypeInferenceError) as ei:
        TypeInterpreter().run(m.entry, [p.type for p in m.entry.params])
    assert re.fullmatch(r"mm\.dir:2:\d+: error: MatMul: inner dimensions differ: "
                        r"\(16, 64\) @ \(32, 8\)", str(ei.value))


def test_results_follow_the_input_device() -> None:
    (y,) = _one_op("MatMul", [T(4, 8, dev=3), T(8, 2, dev=3)])
    assert y == T(4, 2, dev=3)
    b = FunctionBuilder("f")
    c = b.op("Constant", value=np.zeros((2, 2), np.float32), device=2)
    fn = b.ret(b.op("Relu", c))
    (r,) = TypeInterpreter().run(fn, [])
    assert type_of(r) == T(2, 2, dev=2)


# --- Property tests: random shapes and attributes ---------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_SETTINGS = settings(max_examples=60, deadline=None, derandomize=True)


@st.composite
def matmul_shapes(draw: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    m, k, n = (draw(st.integers(1, 4)) for _ in range(3))
    batch = draw(st.lists(st.integers(1, 3), max_size=3))
    ba = tuple(d if draw(st.booleans()) else 1 for d in batch)[draw(st.integers(0, len(batch))):]
    bb = tuple(d if draw(st.booleans()) else 1 for d in batch)[draw(st.integers(0, len(batch))):]
    a = (k,) if draw(st.integers(0, 4)) == 0 else ba + (m, k)
    b = (k,) if draw(st.integers(0, 4)) == 0 else bb + (k, n)
    return a, b


@_SETTINGS
@given(matmul_shapes())
def test_matmul_property(shapes: tuple[tuple[int, ...], tuple[int, ...]]) -> None:
    test_rule_agrees_with_onnx(Case("MatMul", [X(shapes[0]), X(shapes[1])]))


_BOUND = st.one_of(st.integers(-9, 9), st.sampled_from([I64_MIN, I64_MAX]))


@_SETTINGS
@given(st.integers(0, 6), _BOUND, _BOUND, st.integers(-3, 3).filter(bool))
def test_slice_property(d: int, start: int, end: int, step: int) -> None:
    # The reference clamps negative steps as Python does, not as the spec; onnxruntime reads
    # an end of INT64_MAX as "to the edge" whatever the step. ONNX's shape inference follows
    # the spec.
    test_rule_agrees_with_onnx(Case("Slice", [X((d, 2)), K([start]), K([end]), K([0]),
                                              K([step])], oracle="infer"))


@st.composite
def pool_cases(draw: Any) -> Case:
    n = draw(st.integers(1, 2))
    kernel = tuple(draw(st.integers(1, 3)) for _ in range(n))
    dil = tuple(draw(st.integers(1, 2)) for _ in range(n))
    strides = tuple(draw(st.integers(1, 3)) for _ in range(n))
    pads = tuple(draw(st.integers(0, k - 1)) for k in kernel * 2)
    spatial = tuple(draw(st.integers((k - 1) * dd + 1, 9))
                    for k, dd in zip(kernel, dil, strict=True))
    attrs = {"kernel_shape": kernel, "strides": strides, "dilations": dil, "pads": pads,
             "ceil_mode": draw(st.integers(0, 1))}
    # The reference mishandles asymmetric pads; onnxruntime follows the spec.
    return Case("MaxPool", [X((1, 2) + spatial)], attrs, oracle="ort")


@_SETTINGS
@given(pool_cases())
def test_pool_property(case: Case) -> None:
    test_rule_agrees_with_onnx(case)


@_SETTINGS
@given(st.lists(st.integers(1, 4), min_size=1, max_size=4), st.data())
def test_reshape_property(shape: list[int], data: Any) -> None:
    n = int(np.prod(shape))
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    first = data.draw(st.sampled_from(divisors))
    target = [first, -1] if data.draw(st.booleans()) else [-1, first]
    if data.draw(st.booleans()) and len(shape) > 1:
        target = [0] + [-1]  # copy the first dimension, infer the rest
    test_rule_agrees_with_onnx(Case("Reshape", [X(tuple(shape)), K(target)]))


@st.composite
def conv_cases(draw: Any) -> Case:
    n = draw(st.integers(1, 2))
    group = draw(st.sampled_from([1, 2]))
    kernel = tuple(draw(st.integers(1, 3)) for _ in range(n))
    dil = tuple(draw(st.integers(1, 2)) for _ in range(n))
    spatial = tuple(draw(st.integers((k - 1) * dd + 1, 9))
                    for k, dd in zip(kernel, dil, strict=True))
    attrs: dict[str, Any] = {"strides": tuple(draw(st.integers(1, 3)) for _ in range(n)),
                             "dilations": dil, "group": group}
    pad = draw(st.sampled_from(["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]))
    if pad.startswith("SAME"):  # onnxruntime has no dilated SAME convolution
        attrs["dilations"] = (1,) * n
    if pad == "NOTSET":
        attrs["pads"] = tuple(draw(st.integers(0, 2)) for _ in range(2 * n))
    else:
        attrs["auto_pad"] = pad
    return Case("Conv", [X((1, 2 * group) + spatial), X((2 * group, 2) + kernel)], attrs,
                oracle="ort")


@_SETTINGS
@given(conv_cases())
def test_conv_property(case: Case) -> None:
    test_rule_agrees_with_onnx(case)
