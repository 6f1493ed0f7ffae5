"""Type rules of the ops exported Hugging Face / torchvision-like models add beyond the
minimum set (issue 14) agree with ONNX, checked as tests/analysis/test_type_rules.py checks
the others (the rule's types against the ONNX reference's results on a one-node model);
shapes computed from an activation's shape through them stay concrete; bad uses are
one-line errors."""

from __future__ import annotations

import numpy as np
import onnx  # noqa: F401 - the test needs it
import pytest

import tests.analysis.test_type_rules as base  # noqa: E402
from distir.analysis import TypeInterpreter, execute  # noqa: E402
from distir.analysis.rules import TYPE_RULES, full_attrs, load_rules  # noqa: E402
from distir.analysis.values import Concrete  # noqa: E402
from distir.errors import TypeInferenceError  # noqa: E402
from distir.ir import DType, TensorType, parse  # noqa: E402

load_rules()

Case, K, X = base.Case, base.K, base.In
F32, F64, F16, I32, I64 = np.float32, np.float64, np.float16, np.int32, np.int64

CASES: list[base.Case] = [
    *[Case(op, [X((2, 3))]) for op in ("HardSwish", "HardSigmoid", "Mish", "Selu", "Elu",
                                       "Round", "Atan", "Sign")],
    Case("Sign", [X((4,), I64)]),
    Case("IsInf", [X((3, 2), F64)], {"detect_negative": 0}),
    Case("Mod", [X((2, 3), I64), K([1, 2, 3])]),
    Case("Mod", [X((2, 1)), X((4,))], {"fmod": 1}),
    Case("PRelu", [X((2, 3, 4)), X((3, 1))]),
    Case("PRelu", [X((2, 3)), X((), F32)]),
    Case("Xor", [X((2, 3), bool), X((3,), bool)]),
    Case("CastLike", [X((2, 3)), X((1,), F16)]),
    Case("CastLike", [X((2,), I64), X((), F64)]),
    Case("GatherElements", [X((3, 4)), X((2, 4), I64)]),
    Case("GatherElements", [X((3, 4), I32), X((3, 5), I64)], {"axis": 1}),
    Case("GatherND", [X((3, 4, 5)), X((2, 2), I64)]),
    Case("GatherND", [X((3, 4, 5)), X((2, 1, 3), I64)]),
    Case("GatherND", [X((2, 4, 5)), X((2, 6, 1), I64)], {"batch_dims": 1}),
    Case("ScatterElements", [X((3, 4)), K([[1, 0, 2, 1]]), X((1, 4))]),
    Case("ScatterElements", [X((3, 4), I64), K([[0], [3]]), X((2, 1), I64)],
         {"axis": 1, "reduction": "max"}),
    Case("OneHot", [X((2, 3), I64), K(5), K([0.0, 1.0], F32)]),
    Case("OneHot", [X((4,), I64), K(3), K([0, 1], I32)], {"axis": 0}),
    # The reference takes no 1-element depth, nor negative pads; the spec (and
    # onnxruntime) does.
    Case("OneHot", [X((4,), I64), K([3]), K([0, 1], F32)], {"axis": -2}, oracle="ort"),
    Case("NonZero", [K([[1, 0, 2], [0, 0, 3]])]),
    Case("NonZero", [K([0.0, 0.0], F32)]),
    Case("CumSum", [X((3, 4)), K(1)]),
    Case("CumSum", [X((5,), I64), K(0, I32)], {"exclusive": 1, "reverse": 1}),
    Case("TopK", [X((3, 5)), K([2])], n_out=2),
    Case("TopK", [X((4, 3), I64), K([4])], {"axis": 0, "largest": 0}, n_out=2),
    Case("Einsum", [X((2, 3, 4)), X((2, 4, 5))], {"equation": "bij,bjk->bik"}),
    Case("Einsum", [X((3, 4)), X((4, 5))], {"equation": "ij,jk"}),
    Case("Einsum", [X((3, 3))], {"equation": "ii"}),
    Case("Einsum", [X((2, 3, 4)), X((4,))], {"equation": "...j,j->..."}),
    Case("Einsum", [X((2, 1, 3, 4)), X((5, 4, 6))], {"equation": "...ij,...jk->...ik"}),
    Case("Einsum", [X((3, 4))], {"equation": "ij->ji"}),
    Case("ArgMin", [X((3, 4, 5))], {"axis": 1, "keepdims": 0}),
    *[Case(op, [X((2, 3, 4)), K([1])], {"keepdims": 0})
      for op in ("ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare",
                 "ReduceLogSumExp")],
    Case("ReduceMin", [X((2, 3, 4), I64)]),
    Case("Pad", [X((2, 3)), K([1, 0, 0, 2])]),
    Case("Pad", [X((2, 4)), K([1, 2]), None, K([1])], {"mode": "reflect"}),
    Case("Pad", [X((2, 5)), K([-1, 1, 0, -2])], {"mode": "edge"}, oracle="ort"),
    Case("Pad", [X((2, 3), I64), K([1, 1, 1, 1]), K(7)]),
    Case("Resize", [X((1, 1, 3, 4)), None, K([1, 1, 2, 2], F32)]),
    Case("Resize", [X((1, 1, 5, 7)), None, K([1, 1, 0.6, 1.7], F32)], {"mode": "linear"}),
    Case("Resize", [X((1, 2, 4, 4)), None, None, K([1, 2, 3, 6])], {"mode": "cubic"}),
    Case("Resize", [X((1, 2, 4, 8)), None, None, K([5, 5])],
         {"axes": (2, 3), "keep_aspect_ratio_policy": "not_larger"}),
    Case("Resize", [X((1, 2, 4, 8)), None, None, K([5, 5])],
         {"axes": (2, 3), "keep_aspect_ratio_policy": "not_smaller"}),
    Case("Resize", [X((2, 6)), K([0.2, 0.1, 0.9, 0.8], F32), None, K([3, 4])],
         {"coordinate_transformation_mode": "tf_crop_and_resize", "mode": "linear"}),
    Case("DepthToSpace", [X((1, 8, 2, 3))], {"blocksize": 2}),
    Case("DepthToSpace", [X((2, 18, 1, 2))], {"blocksize": 3, "mode": "CRD"}),
    Case("SpaceToDepth", [X((1, 2, 4, 6))], {"blocksize": 2}),
    Case("InstanceNormalization", [X((2, 3, 4, 5)), X((3,)), X((3,))]),
    *[Case(op, [X((2, 3))]) for op in ("Tan", "Asin", "Acos", "Sinh", "Cosh", "Asinh",
                                       "Acosh", "Atanh", "Softsign", "Celu", "ThresholdedRelu",
                                       "Shrink", "Hardmax", "LpNormalization")],
    Case("BitwiseNot", [X((2, 3), I32)]),
    *[Case(op, [X((2, 3), I64), X((3,), I64)]) for op in ("BitwiseAnd", "BitwiseOr",
                                                          "BitwiseXor")],
    Case("Mean", [X((2, 3)), X((3,)), X((2, 1))]),
    Case("Size", [X((2, 3, 4))]),
    Case("GlobalMaxPool", [X((2, 3, 4, 5))]),
    Case("ReduceLogSum", [X((2, 3, 4)), K([1])], {"keepdims": 0}),
    Case("MeanVarianceNormalization", [X((2, 3, 4, 5))], {"axes": (0, 2, 3)}),
    Case("ConvTranspose", [X((1, 2, 3, 3)), X((2, 3, 3, 3))]),
    # The reference splits grouped weights wrongly; onnxruntime does not.
    Case("ConvTranspose", [X((1, 2, 3, 3)), X((2, 3, 3, 3)), X((6,))],
         {"strides": (2, 2), "group": 2, "pads": (1, 0, 0, 1), "output_padding": (1, 0)},
         oracle="ort"),
    Case("ConvTranspose", [X((1, 2, 5)), X((2, 3, 2))],
         {"strides": (3,), "auto_pad": "SAME_UPPER"}),
    Case("ConvTranspose", [X((1, 2, 3, 4)), X((2, 1, 3, 3))],
         {"strides": (2, 2), "output_shape": (8, 10)}),
    Case("ConvTranspose", [X((1, 2, 3, 4)), X((2, 1, 2, 3))], {"dilations": (2, 1)}),
    Case("LSTM", [X((5, 2, 3)), X((1, 16, 3)), X((1, 16, 4))], {"hidden_size": 4}, n_out=3),
    Case("LSTM", [X((5, 2, 3)), X((2, 16, 3)), X((2, 16, 4)), X((2, 32)), K([5, 5], I32),
                  X((2, 2, 4)), X((2, 2, 4)), X((2, 12))], {"direction": "bidirectional"},
         n_out=2),
    Case("LSTM", [X((2, 5, 3)), X((1, 16, 3)), X((1, 16, 4))], {"layout": 1}, n_out=3),
    Case("GRU", [X((5, 2, 3)), X((2, 12, 3)), X((2, 12, 4)), X((2, 24)), None,
                 X((2, 2, 4))], {"direction": "bidirectional"}, n_out=2),
    Case("GRU", [X((2, 5, 3)), X((1, 12, 3)), X((1, 12, 4))],
         {"layout": 1, "linear_before_reset": 1}),
    Case("GridSample", [X((1, 2, 4, 5)), X((1, 3, 6, 2))]),
    Case("GridSample", [X((2, 3, 4, 5, 6), F64), X((2, 2, 3, 4, 3), F64)],
         {"mode": "nearest", "padding_mode": "border"}),
    Case("GroupNormalization", [X((2, 4, 3, 3)), X((4,)), X((4,))], {"num_groups": 2}),
    Case("Col2Im", [X((2, 12, 9)), K([6, 6]), K([2, 2])], {"strides": (2, 2)}),
    Case("Col2Im", [X((1, 12, 12)), K([5, 4]), K([2, 3])],
         {"dilations": (2, 1), "pads": (1, 0, 0, 1)}),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_rule_agrees_with_onnx(case: base.Case) -> None:
    base.test_rule_agrees_with_onnx(case)


def _rule(op: str, args: tuple, attrs: dict | None = None, n_out: int = 1) -> tuple:
    return TYPE_RULES.get(op)(op, args, full_attrs(op, attrs or {}), n_out)


def _t(*shape: int, dt: DType = DType.Float32) -> TensorType:
    return TensorType(dt, shape, 0)


def _k(value: object, dt: DType = DType.Int64) -> Concrete:
    arr = np.asarray(value, dtype=dt.np)
    return Concrete(TensorType(dt, arr.shape, 0), arr)


@pytest.mark.parametrize("op, args, attrs, match", [
    ("NonZero", (_t(3, 4),), {}, "known before it"),
    ("Resize", (_t(1, 1, 2, 2), None, _k([1.0, 1, 2, 2], DType.Float32), _k([1, 1, 4, 4])),
     {}, "exactly one of scales and sizes"),
    ("Resize", (_t(1, 1, 2, 2), None, _k([1.0, 1, 2, 2], DType.Float32)), {"mode": "area"},
     "mode must be one of"),
    ("TopK", (_t(3, 4), _k([5])), {}, "K=5 must lie in"),
    ("TopK", (_t(3, 4), _t(1, dt=DType.Int64)), {}, "K must be known"),
    ("Einsum", (_t(3, 4), _t(5, 6)), {"equation": "ij,jk->ik"}, "'j' has sizes 4 and 5"),
    ("Einsum", (_t(3, 4),), {"equation": "ij,jk->ik"}, "2 input terms for 1 inputs"),
    ("Mod", (_t(3), _t(3)), {}, "needs fmod=1"),
    ("GatherND", (_t(3, 4), _t(2, 3, dt=DType.Int64)), {}, "address 3 axes"),
    ("Pad", (_t(2, 3), _k([1, 1])), {}, "2 entries per padded axis"),
    ("GroupNormalization", (_t(2, 4, 3), _t(4), _t(4)), {"num_groups": 3}, "divisor"),
    ("DepthToSpace", (_t(1, 6, 2, 2),), {"blocksize": 2}, "multiple of blocksize"),
    ("OneHot", (_t(3, dt=DType.Int64), _t(dt=DType.Int64), _k([0.0, 1.0], DType.Float32)),
     {}, "depth must be known"),
    ("PRelu", (_t(2, 3), _t(4)), {}, "does not broadcast to X"),
    ("LSTM", (_t(5, 2, 3), _t(1, 16, 3), _t(1, 16, 4)), {"clip": 3.0}, "clip"),
    ("LSTM", (_t(5, 2, 3), _t(1, 16, 3), _t(1, 16, 4)),
     {"activations": ("Relu", "Tanh", "Tanh")}, "activations"),
    ("LSTM", (_t(5, 2, 3), _t(1, 16, 3), _t(1, 16, 4), None, _k([5, 3], DType.Int32)), {},
     "full length"),
    ("LSTM", (_t(5, 2, 3), _t(1, 16, 3), _t(1, 12, 4)), {}, "R must have shape"),
    ("GridSample", (_t(1, 2, 4, 5), _t(1, 3, 6, 3)), {}, "grid must be"),
    ("Col2Im", (_t(2, 12, 8), _k([6, 6]), _k([2, 2])), {"strides": (2, 2)},
     "give 9 \\(3 x 3\\)"),
    ("Col2Im", (_t(2, 10, 9), _k([6, 6]), _k([2, 2])), {"strides": (2, 2)},
     "not a multiple of the block's 4"),
    ("Col2Im", (_t(2, 12, 9), _k([6, 6]), _k([2])), {}, "same spatial axes"),
    ("Col2Im", (_t(2, 12, 9), _k([1, 1]), _k([2, 2])), {}, "larger than axis 0"),
    ("GRU", (_t(5, 2, 3), _t(1, 12, 3), _t(1, 12, 4)),
     {"activations": ("Sigmoid", "Relu")}, "Sigmoid, Tanh cell"),
])
def test_bad_use_is_a_one_line_error(op: str, args: tuple, attrs: dict, match: str) -> None:
    with pytest.raises(TypeInferenceError, match=match) as e:
        _rule(op, args, attrs)
    assert "\n" not in str(e.value)


SHAPE_CHAIN = """
func @main(%x: Tensor[Float32, (2, 6, 3), 0]) {
  %s = Shape(%x)
  %i = Constant(value=dense<Int64, ()>[1])
  %n = Gather(%s, %i, axis=0)
  %zero = Constant(value=dense<Int64, ()>[0])
  %one = Constant(value=dense<Int64, ()>[1])
  %r = Range(%zero, %n, %one)
  %two = Constant(value=dense<Int64, ()>[2])
  %m = Mod(%r, %two)
  %nz = NonZero(%m)
  %c = CumSum(%m, %zero)
  %cnt = Shape(%nz, start=1)
  %last = Constant(value=dense<Int64>[5])
  %total = Gather(%c, %last, axis=0)
  %minus = Constant(value=dense<Int64>[-1])
  %shape = Concat(%minus, %cnt, %total, axis=0)
  %y = Reshape(%x, %shape)
  return %y
}
"""


def test_shape_chain_through_range_mod_nonzero_cumsum_stays_concrete() -> None:
    """Range, Mod, NonZero and CumSum of small integer tensors computed from a shape give
    known values, so a Reshape to a shape computed through them types exactly:
    Range(0, 6) % 2 = [0 1 0 1 0 1] has 3 non-zeros and a cumulative sum ending at 3."""
    fn = parse(SHAPE_CHAIN).entry
    (y,) = TypeInterpreter().run(fn, [p.type for p in fn.params])
    assert y == TensorType(DType.Float32, (4, 3, 3), 0)
    x = np.arange(36, dtype=np.float32).reshape(2, 6, 3)
    (out,) = execute(fn, [x])
    np.testing.assert_array_equal(out, x.reshape(4, 3, 3))


def test_reference_takes_negative_axes() -> None:
    """GatherElements' axis and Resize's axes may count from the end (the ONNX reference
    kernels mishandle that; the numpy rules make them non-negative first)."""
    from distir.analysis.rules import NUMPY_RULES

    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    idx = np.array([[0, 3], [1, -1], [2, 2]], np.int64)
    (g,) = NUMPY_RULES.get("GatherElements")("GatherElements", (x, idx),
                                             full_attrs("GatherElements", {"axis": -1}), 1)
    np.testing.assert_array_equal(g, np.take_along_axis(x, idx % 4, axis=1))
    # The BERT export's token-type gather: a broadcast row, 64 wide, gathered at 8 places.
    row = np.broadcast_to(np.arange(64, dtype=np.int64)[None, :], (1, 64))
    at = np.array([[5, 63, 0, 7, 40, 41, 33, 2]], np.int64)
    (g,) = NUMPY_RULES.get("GatherElements")("GatherElements", (row, at),
                                             full_attrs("GatherElements", {"axis": 1}), 1)
    np.testing.assert_array_equal(g, at)
    img = x.reshape(1, 1, 3, 4)
    scales = np.array([2.0, 2.0], np.float32)
    want = NUMPY_RULES.get("Resize")("Resize", (img, None, scales),
                                     full_attrs("Resize", {"axes": (2, 3)}), 1)[0]
    got = NUMPY_RULES.get("Resize")("Resize", (img, None, scales),
                                    full_attrs("Resize", {"axes": (-2, -1)}), 1)[0]
    assert got.shape == (1, 1, 6, 8)
    np.testing.assert_array_equal(got, want)


def test_lp_normalization_p1_matches_onnxruntime() -> None:
    """onnx.reference sums x ** p, not |x| ** p; the numpy rule follows the spec."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from distir.analysis.rules import NUMPY_RULES

    x = np.array([[1.0, -2.0, 0.0], [-3.0, 4.0, 0.0]], np.float32)
    node = helper.make_node("LpNormalization", ["x"], ["y"], axis=0, p=1)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      x.shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = sess.run(None, {"x": x})
    (got,) = NUMPY_RULES.get("LpNormalization")(
        "LpNormalization", (x,), full_attrs("LpNormalization", {"axis": 0, "p": 1}), 1)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert got[0, 2] == 0.0  # a zero column stays 0
