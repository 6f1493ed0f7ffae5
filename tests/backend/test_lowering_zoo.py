"""The lowerings of the ops exported Hugging Face / torchvision-like models use beyond the
minimum set (issue 14), against the reference executor, one op at a time on the CPU (the
harness of test_lowering.py)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch  # noqa: F401 - the test needs it

import tests.backend.test_lowering as base  # noqa: E402
from distir.backend.lowering import LOWERINGS, load_lowerings  # noqa: E402
from distir.errors import UnsupportedError  # noqa: E402
from distir.ir import DType, parse  # noqa: E402
from distir.ir._onnx_schemas import ONNX_SCHEMAS  # noqa: E402

F32, F64, I64, I32, BOOL = DType.Float32, DType.Float64, DType.Int64, DType.Int32, DType.Bool
X = (F32, (3, 4))
one_op, check = base.one_op, base.check
rng = np.random.default_rng(7)


def i64(*v: int) -> np.ndarray:
    return np.array(v, np.int64)


def test_every_onnx_op_has_a_lowering() -> None:
    load_lowerings()
    assert sorted(op for op in ONNX_SCHEMAS if op not in LOWERINGS) == []


@pytest.mark.parametrize("op, attrs", [
    ("HardSwish", {}), ("Mish", {}), ("Round", {}), ("Atan", {}), ("Sign", {}),
    ("HardSigmoid", {}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}), ("Elu", {}),
    ("Elu", {"alpha": 0.5}), ("Selu", {}), ("Selu", {"alpha": 1.5, "gamma": 2.0}),
])
def test_unary(op: str, attrs: dict) -> None:
    x = (rng.standard_normal((3, 4)) * 3).astype(np.float32)
    x[0, :2] = [0.5, -2.5]  # Round: halves go to the even neighbour
    check(one_op(op, [X], **attrs), [x])


@pytest.mark.parametrize("neg, pos", [(1, 1), (0, 1), (1, 0), (0, 0)])
def test_isinf(neg: int, pos: int) -> None:
    x = np.array([[1.0, np.inf, -np.inf, np.nan]], np.float32)
    check(one_op("IsInf", [(F32, (1, 4))], detect_negative=neg, detect_positive=pos), [x])


def test_mod_prelu_xor_castlike() -> None:
    a, b = np.array([7, -7, 9, -9, 5, 0]), np.array([2, 2, -4, 4, -3, 5])
    check(one_op("Mod", [(I64, (6,)), (I64, (6,))]), [a, b])
    check(one_op("Mod", [(I64, (6,)), (I64, (6,))], fmod=1), [a, b])
    check(one_op("Mod", [(F32, (6,)), (F32, (6,))], fmod=1),
          [a.astype(np.float32) + 0.5, b.astype(np.float32) + 0.25])
    check(one_op("PRelu", [(F32, (2, 3, 4)), (F32, (3, 1))]))
    check(one_op("PRelu", [X, np.array([0.1, 0.2, 0.3, 0.4], np.float32)]))
    check(one_op("Xor", [(BOOL, (3, 4)), (BOOL, (4,))]))
    check(one_op("CastLike", [X, np.zeros(1, np.float16)]), rtol=1e-3, atol=1e-3)
    check(one_op("CastLike", [(F32, (5,)), np.zeros((), np.int64)]),
          [np.array([1.7, -1.7, 0.2, 3.0, -0.9], np.float32)])


def test_gather_elements_and_nd() -> None:
    idx = np.array([[0, -1, 2, 1], [2, 0, -3, 1]], np.int64)
    check(one_op("GatherElements", [X, idx]))
    check(one_op("GatherElements", [X, np.array([[3, -1], [0, 1], [2, 2]], np.int64)],
                 axis=1))
    check(one_op("GatherElements", [X, (I64, (3, 2))], axis=-1),
          [rng.standard_normal((3, 4)).astype(np.float32), rng.integers(-4, 4, (3, 2))])
    # A long axis (the reference's numpy.choose takes at most 32 or 64 choices), and
    # indices shorter than the data on another axis.
    check(one_op("GatherElements", [(F32, (3, 100)), (I64, (2, 40))], axis=1),
          [rng.standard_normal((3, 100)).astype(np.float32), rng.integers(-100, 100, (2, 40))])
    check(one_op("GatherND", [(F32, (3, 4, 5)), np.array([[0, 1], [-1, 3]], np.int64)]))
    check(one_op("GatherND", [(F32, (3, 4, 5)), np.array([[[2]], [[0]]], np.int64)]))
    check(one_op("GatherND", [(F32, (2, 4, 5)), np.array([[[1], [3]], [[0], [-1]]], np.int64)],
                 batch_dims=1))
    check(one_op("GatherND", [(F32, (2, 3, 4, 5)), np.array([[1, 2], [0, 3]], np.int64)],
                 batch_dims=1))


@pytest.mark.parametrize("red", ["none", "add", "mul", "max", "min"])
def test_scatter_elements(red: str) -> None:
    idx = np.array([[1, 0, 2, -1], [1, 2, 0, 0]], np.int64)
    if red == "none":
        idx = np.array([[1, 0, 2, -1], [0, 2, 1, 0]], np.int64)  # no repeated target
    check(one_op("ScatterElements", [X, idx, (F32, (2, 4))], reduction=red))
    check(one_op("ScatterElements", [X, np.array([[3], [-4], [1]], np.int64), (F32, (3, 1))],
                 axis=1, reduction=red))


def test_gather_scatter_of_an_expanded_index() -> None:
    """An index broadcast by ``Expand`` (DeBERTa's relative positions, over batch and
    heads) is wrapped once per distinct element and read as a view; an adding scatter into
    a tensor the program is done with adds in place; both as the reference executes them,
    negative indices included."""
    fn = parse("""
func @f(%x: Tensor[Float32, (6, 5, 7), 0], %u: Tensor[Float32, (6, 5, 4), 0],
        %i: Tensor[Int64, (1, 5, 4), 0]) {
  %shape = Constant(value=dense<Int64, (3,)>[6, 5, 4])
  %ie = Expand(%i, %shape)
  %g = GatherElements(%x, %ie, axis=-1)
  %z = Neg(%x)
  %s = ScatterElements(%z, %ie, %u, axis=-1, reduction="add")
  %t = ScatterElements(%x, %ie, %u, axis=2, reduction="add")
  return %g, %s, %t
}
""").functions["f"]
    x, u = (rng.standard_normal(s).astype(np.float32) for s in ((6, 5, 7), (6, 5, 4)))
    check(fn, [x, u, rng.integers(-7, 7, (1, 5, 4))])


def test_one_hot_nonzero_cumsum() -> None:
    check(one_op("OneHot", [(I64, (2, 3)), np.array(4, np.int64),
                            np.array([0.0, 1.0], np.float32)]),
          [np.array([[0, 3, -1], [-4, 5, 2]], np.int64)])
    check(one_op("OneHot", [(I64, (3,)), np.array(3, np.int64), np.array([2, 7], np.int64)],
                 axis=0), [np.array([2, -2, 0], np.int64)])
    check(one_op("NonZero", [np.array([[1, 0, 2], [0, 0, 3]], np.int64)]))
    check(one_op("NonZero", [np.array([0.0, 1.5, 0.0, -2.0], np.float32)]))
    for ex, rev in itertools.product((0, 1), repeat=2):
        check(one_op("CumSum", [X, np.array(1, np.int64)], exclusive=ex, reverse=rev))
        check(one_op("CumSum", [(I64, (5, 2)), np.array(0, np.int32)], exclusive=ex,
                     reverse=rev))


def test_topk_and_argmin() -> None:
    ties = np.array([[3, 1, 3, 2, 1], [0, 0, 0, 1, 1]], np.int64)
    for largest in (1, 0):
        check(one_op("TopK", [(I64, (2, 5)), i64(3)], n_out=2, largest=largest), [ties])
        check(one_op("TopK", [(F32, (4, 3)), i64(2)], n_out=2, axis=0, largest=largest))
    check(one_op("ArgMin", [(F32, (3, 5))], axis=1, keepdims=0))
    check(one_op("ArgMin", [(I64, (2, 5))], axis=1, select_last_index=1), [ties])


@pytest.mark.parametrize("eq, shapes", [
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij,jk", [(3, 4), (4, 5)]),
    ("ii", [(3, 3)]),
    ("ij->ji", [(3, 4)]),
    ("...j,j->...", [(2, 3, 4), (4,)]),
    ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
])
def test_einsum(eq: str, shapes: list) -> None:
    check(one_op("Einsum", [(F32, s) for s in shapes], equation=eq), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", ["ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                                "ReduceSumSquare", "ReduceLogSumExp"])
def test_reductions(op: str) -> None:
    check(one_op(op, [(F32, (2, 3, 4)), i64(1)], keepdims=0), rtol=1e-4)
    check(one_op(op, [(F32, (2, 3, 4)), i64(0, -1)]), rtol=1e-4)
    check(one_op(op, [(F32, (2, 3, 4))]), rtol=1e-4)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad(mode: str) -> None:
    check(one_op("Pad", [(F32, (3, 4)), i64(1, 2, 2, 1)], mode=mode))
    check(one_op("Pad", [(F32, (2, 3, 5)), i64(2, 1), None, i64(-1)], mode=mode))
    check(one_op("Pad", [(I64, (3, 4)), i64(1, 0, 0, 2), np.array(9, np.int64)], mode=mode))


def test_pad_negative_crops() -> None:
    for mode in ("constant", "edge"):
        fn = one_op("Pad", [(F32, (3, 5)), i64(-1, 2, 1, -2)], mode=mode)
        x = rng.standard_normal((3, 5)).astype(np.float32)
        (got,) = base.run_local(fn, [x])
        want = np.pad(x[1:, :3], ((0, 1), (2, 0)), mode=mode)
        np.testing.assert_array_equal(got, want)


def test_depth_space_and_norms() -> None:
    check(one_op("DepthToSpace", [(F32, (2, 8, 2, 3))], blocksize=2))
    check(one_op("DepthToSpace", [(F32, (2, 18, 2, 1))], blocksize=3, mode="CRD"))
    check(one_op("SpaceToDepth", [(F32, (2, 2, 4, 6))], blocksize=2))
    check(one_op("InstanceNormalization", [(F32, (2, 3, 4, 5)), (F32, (3,)), (F32, (3,))]),
          rtol=1e-4, atol=1e-5)
    check(one_op("InstanceNormalization", [(F32, (2, 3, 7)), (F32, (3,)), (F32, (3,))],
                 epsilon=1e-3), rtol=1e-4, atol=1e-5)
    check(one_op("GroupNormalization", [(F32, (2, 6, 3, 3)), (F32, (6,)), (F32, (6,))],
                 num_groups=3), rtol=1e-4, atol=1e-5)
    # Statistics in a wider stash type than X (not one fused kernel), and one group.
    check(one_op("GroupNormalization", [(F64, (2, 6, 3, 3)), (F64, (6,)), (F64, (6,))],
                 num_groups=2, stash_type=1), rtol=1e-4, atol=1e-5)
    check(one_op("GroupNormalization", [(F32, (2, 4, 5)), (F32, (4,)), (F32, (4,))],
                 num_groups=1), rtol=1e-4, atol=1e-5)
    # (N, C): each value its own group, the result is the bias.
    check(one_op("InstanceNormalization", [(F32, (2, 3)), (F32, (3,)), (F32, (3,))]),
          rtol=1e-4, atol=1e-5)


_CTMS = ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
         "asymmetric"]
_SCALES = [np.array([1, 1, 2.0, 1.5], np.float32), np.array([1, 1, 0.6, 0.34], np.float32),
           np.array([1, 1, 1.0, 3.0], np.float32), np.array([1, 1, 1.0 / 7, 1.0], np.float32)]


@pytest.mark.parametrize("mode, nearest", [("nearest", m) for m in (
    "round_prefer_floor", "round_prefer_ceil", "floor", "ceil")] + [("linear", ""),
                                                                   ("cubic", "")])
@pytest.mark.parametrize("ctm", _CTMS)
def test_resize_modes(mode: str, nearest: str, ctm: str) -> None:
    attrs = {"mode": mode, "coordinate_transformation_mode": ctm}
    if nearest:
        attrs["nearest_mode"] = nearest
    for sc in _SCALES:
        check(one_op("Resize", [(F32, (1, 2, 7, 6)), None, sc], **attrs), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_antialias_and_exclude_outside(mode: str) -> None:
    for sc in _SCALES:
        check(one_op("Resize", [(F32, (1, 2, 7, 6)), None, sc], mode=mode, antialias=1),
              rtol=1e-4, atol=1e-5)
    if mode == "cubic":
        check(one_op("Resize", [(F32, (1, 2, 7, 6)), None, _SCALES[0]], mode=mode,
                     exclude_outside=1, cubic_coeff_a=-0.5), rtol=1e-4, atol=1e-5)


def test_resize_sizes_axes_crop_and_integers() -> None:
    check(one_op("Resize", [(F32, (1, 2, 4, 6)), None, None, i64(1, 2, 7, 3)],
                 mode="linear"), rtol=1e-4, atol=1e-5)
    for policy in ("not_larger", "not_smaller"):
        check(one_op("Resize", [(F32, (1, 2, 4, 8)), None, None, i64(5, 5)], axes=(2, 3),
                     keep_aspect_ratio_policy=policy, mode="cubic"), rtol=1e-4, atol=1e-5)
    check(one_op("Resize", [(F32, (2, 6, 5)), np.array([0.2, 0.8, -0.3, 1.2], np.float32),
                            None, i64(4, 6)], axes=(1, 2),
                 coordinate_transformation_mode="tf_crop_and_resize", mode="linear",
                 extrapolation_value=-3.0), rtol=1e-4, atol=1e-5)
    check(one_op("Resize", [(F32, (1, 2, 4, 8)), None, np.array([1.5, 0.5], np.float32)],
                 axes=(-2, -1), mode="linear"), rtol=1e-4, atol=1e-5)
    check(one_op("Resize", [(I64, (1, 1, 3, 4)), None, np.array([1, 1, 2, 2.5], np.float32)]))
    check(one_op("Resize", [(F32, (1, 1, 3, 4)), np.zeros(0, np.float32),
                            np.array([1, 1, 2, 2], np.float32)]))  # an empty roi is omitted


def test_resize_to_sizes_computed_from_a_shape() -> None:
    """Exports compute the sizes from ``Shape``: the scales then come from the types."""
    fn = parse("""
func @main(%x: Tensor[Float32, (1, 2, 5, 3), 0]) {
  %s = Shape(%x, end=2)
  %hw = Constant(value=dense<Int64>[8, 7])
  %sizes = Concat(%s, %hw, axis=0)
  %y = Resize(%x, _, _, %sizes, mode="linear")
  return %y
}
""").entry
    check(fn, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op, specs, known, attrs", [
    ("ReduceSum", [(F32, (2, 3, 4)), (I64, (1,))], i64(1), {"keepdims": 0}),
    ("ReduceL2", [(F32, (2, 3, 4)), (I64, (2,))], i64(0, -1), {}),
    ("Slice", [(F32, (5, 6)), (I64, (1,)), (I64, (1,))], i64(4), {}),
    ("Trilu", [(F32, (4, 5)), (I64, ())], np.array(1, np.int64), {}),
    ("CumSum", [(F32, (3, 4)), (I64, ())], np.array(1, np.int64), {"reverse": 1}),
    ("Pad", [(F32, (3, 4)), (I64, (4,))], i64(1, 0, 2, 1), {"mode": "reflect"}),
    ("Resize", [(F32, (1, 1, 3, 4)), None, (F32, (4,))], np.array([1, 1, 2, 1.5], np.float32),
     {"mode": "linear"}),
])
def test_operands_bound_to_initializers(op: str, specs: list, known: np.ndarray,
                                        attrs: dict) -> None:
    """Exports (torch.onnx's dynamo exporter) pass axes, bounds and scales as parameters
    bound to initializers, not Constants: the lowering reads them when it runs."""
    import distir

    fn = one_op(op, specs, **attrs)
    last = fn.params[-1].name
    fn.initializers = {last: known}
    if op == "Slice":  # starts is known, ends bound to an initializer
        fn.initializers = {fn.params[1].name: i64(1), last: known}
    free = [p for p in fn.params if p.name not in fn.initializers]
    xs = base.random_for(fn)[:len(free)]
    ref = distir.execute(fn, xs)
    args = [fn.initializers.get(p.name) for p in fn.params]
    args = [xs.pop(0) if a is None else a for a in args]
    for _ in range(2):  # the second step reuses the kernel compiled for these values
        (got,) = base.run_local(fn, args)
        np.testing.assert_allclose(got, ref[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op, attrs", [
    ("Tan", {}), ("Asin", {}), ("Acos", {}), ("Sinh", {}), ("Cosh", {}), ("Asinh", {}),
    ("Atanh", {}), ("Softsign", {}), ("Celu", {"alpha": 0.7}), ("ThresholdedRelu", {}),
    ("Shrink", {"bias": 0.1, "lambd": 0.2}), ("Hardmax", {"axis": 0}), ("LpNormalization", {}),
    ("LpNormalization", {"axis": 0, "p": 1}), ("MeanVarianceNormalization", {"axes": (0, 1)}),
])
def test_more_unary(op: str, attrs: dict) -> None:
    x = (rng.uniform(-0.9, 0.9, (3, 4))).astype(np.float32)
    x[1] = 0.0  # a zero row: LpNormalization gives 0 there
    check(one_op(op, [X], **attrs), [x], rtol=1e-4, atol=1e-5)
    if op == "Hardmax":
        check(one_op(op, [X]), [np.array([[1, 3, 3, 0]] * 3, np.float32)])


def test_acosh_bitwise_mean_size_pools() -> None:
    check(one_op("Acosh", [X]), [rng.uniform(1.0, 3.0, (3, 4)).astype(np.float32)])
    ints = [rng.integers(-50, 50, (3, 4)), rng.integers(-50, 50, (4,))]
    for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor"):
        check(one_op(op, [(I64, (3, 4)), (I64, (4,))]), ints)
    check(one_op("BitwiseNot", [(I32, (3, 4))]), [ints[0].astype(np.int32)])
    check(one_op("Mean", [(F32, (2, 3)), (F32, (3,)), (F32, (2, 1))]))
    check(one_op("Size", [(F32, (2, 3, 4))]))
    check(one_op("GlobalMaxPool", [(F32, (2, 3, 4, 5))]))
    check(one_op("ReduceLogSum", [(F32, (2, 3, 4)), i64(1)]), positive=True, rtol=1e-4)


@pytest.mark.parametrize("attrs, shapes", [
    ({}, [(1, 2, 3, 3), (2, 3, 3, 3)]),
    ({"strides": (2, 2)}, [(2, 2, 3, 4), (2, 3, 3, 3), (3,)]),
    ({"strides": (2, 2), "pads": (1, 0, 0, 1), "output_padding": (1, 0)},
     [(1, 2, 3, 3), (2, 3, 3, 3)]),
    ({"strides": (2, 2), "group": 2}, [(1, 4, 3, 3), (4, 3, 2, 2), (6,)]),
    ({"strides": (3,), "auto_pad": "SAME_UPPER"}, [(1, 2, 5), (2, 3, 2)]),
    ({"strides": (3,), "auto_pad": "SAME_LOWER"}, [(1, 2, 5), (2, 3, 2)]),
    ({"strides": (2, 2), "output_shape": (8, 10)}, [(1, 2, 3, 4), (2, 1, 3, 3)]),
    ({"dilations": (2, 1)}, [(1, 2, 3, 4), (2, 1, 2, 3)]),
    ({"strides": (1, 2, 1)}, [(1, 2, 2, 3, 2), (2, 2, 2, 2, 2)]),
])
def test_conv_transpose(attrs: dict, shapes: list) -> None:
    check(one_op("ConvTranspose", [(F32, s) for s in shapes], **attrs), rtol=1e-4, atol=1e-5)


def test_grouped_conv_transpose_matches_onnxruntime() -> None:
    """The numpy kernel against onnxruntime (onnx.reference's is wrong for group > 1)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    import distir

    x = rng.standard_normal((1, 4, 3, 3)).astype(np.float32)
    w = rng.standard_normal((4, 3, 2, 2)).astype(np.float32)
    attrs = {"strides": [2, 2], "group": 2, "pads": [1, 0, 0, 1], "output_padding": [1, 0]}
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], **attrs)
    g = helper.make_graph([node], "g", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
        helper.make_tensor_value_info("w", TensorProto.FLOAT, w.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    (want,) = ort.InferenceSession(m.SerializeToString(),
                                   providers=["CPUExecutionProvider"]).run(None, {"x": x, "w": w})
    fn = one_op("ConvTranspose", [(F32, x.shape), (F32, w.shape)],
                **{k: tuple(v) if isinstance(v, list) else v for k, v in attrs.items()})
    (got,) = distir.execute(fn, [x, w])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    check(fn, [x, w], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_lstm(direction: str, layout: int) -> None:
    d, t, n, i, h = (2 if direction == "bidirectional" else 1), 5, 2, 3, 4
    x = (n, t, i) if layout else (t, n, i)
    state = (n, d, h) if layout else (d, n, h)
    full = [(F32, x), (F32, (d, 4 * h, i)), (F32, (d, 4 * h, h)), (F32, (d, 8 * h)), None,
            (F32, state), (F32, state), (F32, (d, 3 * h))]
    for n_out in (1, 3):
        check(one_op("LSTM", full, n_out=n_out, direction=direction, layout=layout),
              rtol=1e-4, atol=1e-5)
    check(one_op("LSTM", full[:3], n_out=2, direction=direction, layout=layout, hidden_size=h),
          rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout, lbr", [(0, 0), (1, 0), (0, 1)])
def test_gru(direction: str, layout: int, lbr: int) -> None:
    d, t, n, i, h = (2 if direction == "bidirectional" else 1), 5, 2, 3, 4
    x = (n, t, i) if layout else (t, n, i)
    state = (n, d, h) if layout else (d, n, h)
    full = [(F32, x), (F32, (d, 3 * h, i)), (F32, (d, 3 * h, h)), (F32, (d, 6 * h)), None,
            (F32, state)]
    attrs = {"direction": direction, "layout": layout, "linear_before_reset": lbr}
    for n_out in (1, 2):
        check(one_op("GRU", full, n_out=n_out, **attrs), rtol=1e-4, atol=1e-5)
    check(one_op("GRU", full[:3], n_out=2, **attrs), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("corners", [0, 1])
def test_grid_sample(mode: str, padding: str, corners: int) -> None:
    x = rng.standard_normal((2, 3, 5, 6)).astype(np.float32)
    g = rng.uniform(-1.3, 1.3, (2, 4, 7, 2)).astype(np.float32)  # some points outside
    fn = one_op("GridSample", [(F32, x.shape), (F32, g.shape)], mode=mode,
                padding_mode=padding, align_corners=corners)
    if mode == "cubic" and padding == "border":
        with pytest.raises(UnsupportedError, match="border"):
            base.run_local(fn, [x, g])
        return
    check(fn, [x, g], rtol=1e-4, atol=1e-5)
    if mode == "linear":  # and over 3 spatial axes
        x3 = rng.standard_normal((1, 2, 3, 4, 5)).astype(np.float32)
        g3 = rng.uniform(-1.2, 1.2, (1, 2, 3, 4, 3)).astype(np.float32)
        fn3 = one_op("GridSample", [(F32, x3.shape), (F32, g3.shape)], mode=mode,
                     padding_mode=padding, align_corners=corners)
        check(fn3, [x3, g3], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("rows, cols, image, block, attrs", [
    (12, 9, (6, 6), (2, 2), {"strides": [2, 2]}),  # tiles (MobileViTV2's patches)
    (12, 12, (5, 4), (2, 3), {"dilations": [2, 1], "pads": [1, 0, 0, 1]}),  # overlapping
    (6, 4, (6,), (3,), {}),  # one spatial axis
    (6, 3, (7,), (3,), {"strides": [2], "pads": [1, 0]}),
])
def test_col2im(rows: int, cols: int, image: tuple, block: tuple, attrs: dict) -> None:
    """``torch.nn.functional.fold`` against ONNX's reference: overlapping blocks summed,
    unequal pads at the two ends cropped, one spatial axis as a row of height 1."""
    check(one_op("Col2Im", [(F32, (2, rows, cols)), i64(*image), i64(*block)], **attrs),
          rtol=1e-5, atol=1e-5)


def test_col2im_of_three_spatial_axes_is_refused_in_one_line() -> None:
    fn = one_op("Col2Im", [(F32, (1, 8, 8)), i64(3, 3, 3), i64(2, 2, 2)])
    with pytest.raises(UnsupportedError, match="3 spatial axes"):
        base.run_local(fn, [np.ones((1, 8, 8), np.float32)])


def test_pad_with_negative_pads_crops() -> None:
    """A negative pad crops (``ZeroPad2d((0, 0, 1, -1))``, RWKV's token shift): the
    reference executor crops, then pads (ONNX's reference kernel fails on it), as
    ``F.pad`` does."""
    check(one_op("Pad", [(F32, (2, 5, 4)), i64(0, 1, 0, 0, -1, 0)]))
    check(one_op("Pad", [(F32, (2, 5, 4)), i64(-2, 3), np.array(1.5, np.float32), i64(-1)]))
