"""``grad``: every VJP rule against central finite differences of the reference executor in
float64, and the errors a user can cause.

Each case applies one op to small random inputs and differentiates ``sum(y * r)`` (``r`` a
fixed random tensor per result), so every element of the cotangent is different. The
directional derivative along a random direction, from the executor, must equal the dot
product of the gradient with that direction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

import distir
from distir.errors import DistIRError, TransformError
from distir.ir import DType, FunctionBuilder, TensorType
from distir.ir.core import Function, Value
from distir.ir.schemas import SCHEMAS
from distir.transforms import grad
from distir.transforms.grad import default_wrt
from distir.transforms.vjp import VJP_RULES, load_vjp_rules

F64 = DType.Float64


def x(*shape: int) -> tuple:
    """A float parameter (differentiated)."""
    return ("x", shape)


def pos(*shape: int) -> tuple:
    """A positive float parameter (differentiated)."""
    return ("p", shape)


def data(arr: Any) -> tuple:
    """A parameter not differentiated (indices, conditions), with this value."""
    return ("d", np.asarray(arr))


def k(arr: Any) -> tuple:
    """A ``Constant`` (shapes, axes, bounds)."""
    return ("k", np.asarray(arr))


def build(op_type: str, specs: Sequence[tuple | None], attrs: dict[str, Any],
          use: Sequence[int] | None = None, n_out: int | None = None,
          seed: int = 0) -> tuple[Function, list[np.ndarray], list[str]]:
    """``loss = sum_j sum(y_j * r_j)`` over results ``use`` of one op; the inputs and the
    names of the differentiated parameters."""
    rng = np.random.default_rng(seed)

    def make(with_loss: list[tuple[int, ...]] | None) -> tuple[Function, list, list[str]]:
        b = FunctionBuilder("main")
        ins: list[Value | None] = []
        vals: list[np.ndarray] = []
        names: list[str] = []
        r = np.random.default_rng(seed)
        for i, s in enumerate(specs):
            if s is None:
                ins.append(None)
                continue
            kind, v = s
            if kind in ("x", "p"):
                a = r.standard_normal(v)
                if kind == "p":
                    a = np.abs(a) + 0.5
                ins.append(b.param(f"in{i}", TensorType(F64, tuple(v), 0)))
                vals.append(a)
                names.append(f"in{i}")
            elif kind == "d":
                ins.append(b.param(f"in{i}", TensorType(DType.from_np(v.dtype), v.shape, 0)))
                vals.append(v)
            else:
                ins.append(b.op("Constant", value=v, device=0))
        outs = b.op(op_type, *ins, num_results=n_out, **attrs)
        outs = list(outs) if isinstance(outs, tuple) else [outs]
        sel = list(range(len(outs))) if use is None else list(use)
        if with_loss is None:
            return b.ret(*[outs[j] for j in sel]), vals, names
        total = None
        for j, shape in zip(sel, with_loss):
            rj = b.op("Constant", value=r.standard_normal(shape), device=0)
            term = b.op("ReduceSum", b.op("Mul", outs[j], rj), keepdims=0)
            total = term if total is None else b.op("Add", total, term)
        assert total is not None
        return b.ret(total), vals, names

    fn0, _, _ = make(None)
    shapes = [t.shape for t in distir.infer_types(fn0)]  # type: ignore[attr-defined]
    del rng
    return make(shapes)


def check_grad(fn: Function, vals: list[np.ndarray], names: list[str], *, eps: float = 1e-4,
               rtol: float = 1e-6, directions: int = 2) -> None:
    g = grad(fn, names)
    distir.infer_types(g)
    outs = distir.execute(g, vals)
    loss0 = distir.execute(fn, vals)[0]
    np.testing.assert_allclose(outs[0], loss0, rtol=1e-12)
    params = [p.name for p in fn.params]
    rng = np.random.default_rng(1)
    for name, gi in zip(names, outs[1:]):
        i = params.index(name)
        assert gi.shape == vals[i].shape, name
        for _ in range(directions):
            v = rng.standard_normal(vals[i].shape)
            up = list(vals)
            dn = list(vals)
            up[i] = vals[i] + eps * v
            dn[i] = vals[i] - eps * v
            fd = (distir.execute(fn, up)[0] - distir.execute(fn, dn)[0]) / (2 * eps)
            an = float(np.sum(gi * v))
            assert abs(fd - an) <= rtol * max(1.0, abs(fd)) + 1e-7, (name, fd, an)


CASES: list[tuple[str, str, list, dict, Any]] = [
    # Elementwise with broadcasting.
    ("add", "Add", [x(3, 4), x(4)], {}, None),
    ("add_bcast", "Add", [x(2, 1, 4), x(3, 1)], {}, None),
    ("sub", "Sub", [x(3, 4), x(3, 1)], {}, None),
    ("mul", "Mul", [x(3, 4), x(1, 4)], {}, None),
    ("div", "Div", [x(3, 4), pos(3, 1)], {}, None),
    ("sum3", "Sum", [x(3, 4), x(4), x(3, 1)], {}, None),
    ("neg", "Neg", [x(3, 4)], {}, None),
    ("pow_known", "Pow", [pos(3, 4), k(3.0)], {}, None),
    ("pow_square", "Pow", [x(3, 4), k(2.0)], {}, None),
    ("pow_both", "Pow", [pos(3, 4), x(4)], {}, None),
    ("sqrt", "Sqrt", [pos(3, 4)], {}, None),
    ("exp", "Exp", [x(3, 4)], {}, None),
    ("log", "Log", [pos(3, 4)], {}, None),
    ("reciprocal", "Reciprocal", [pos(3, 4)], {}, None),
    ("erf", "Erf", [x(3, 4)], {}, None),
    ("tanh", "Tanh", [x(3, 4)], {}, None),
    ("sigmoid", "Sigmoid", [x(3, 4)], {}, None),
    ("softplus", "Softplus", [x(3, 4)], {}, None),
    ("sin", "Sin", [x(3, 4)], {}, None),
    ("cos", "Cos", [x(3, 4)], {}, None),
    ("relu", "Relu", [x(3, 4)], {}, None),
    ("gelu", "Gelu", [x(3, 4)], {}, None),
    ("gelu_tanh", "Gelu", [x(3, 4)], {"approximate": "tanh"}, None),
    ("leaky_relu", "LeakyRelu", [x(3, 4)], {"alpha": 0.1}, None),
    ("abs", "Abs", [x(3, 4)], {}, None),
    ("clip", "Clip", [x(3, 4), k(-0.5), k(0.5)], {}, None),
    ("max", "Max", [x(3, 4), x(4)], {}, None),
    ("min", "Min", [x(3, 4), x(3, 4)], {}, None),
    ("where", "Where", [data(np.array([[True, False, True, False]] * 3)), x(3, 4), x(4)], {},
     None),
    ("identity", "Identity", [x(3, 4)], {}, None),
    ("dropout_inference", "Dropout", [x(3, 4)], {}, None),
    # Shapes and indexing.
    ("reshape", "Reshape", [x(3, 4), k([2, 6])], {}, None),
    ("flatten", "Flatten", [x(2, 3, 4)], {"axis": 1}, None),
    ("squeeze", "Squeeze", [x(3, 1, 4), k([1])], {}, None),
    ("unsqueeze", "Unsqueeze", [x(3, 4), k([0, 2])], {}, None),
    ("transpose", "Transpose", [x(2, 3, 4)], {"perm": [2, 0, 1]}, None),
    ("transpose_default", "Transpose", [x(2, 3, 4)], {}, None),
    ("expand", "Expand", [x(3, 1), k([2, 3, 4])], {}, None),
    ("concat", "Concat", [x(3, 1), x(3, 4), x(3, 2)], {"axis": 1}, None),
    ("split", "Split", [x(4, 6), k([2, 4])], {"axis": 1}, 2),
    ("split_half_used", "Split", [x(4, 6)], {"axis": 1, "num_outputs": 3}, ([1], 3)),
    ("slice", "Slice", [x(5, 6), k([1, 2]), k([4, 5]), k([0, 1])], {}, None),
    ("slice_neg_axis", "Slice", [x(5, 6), k([-3]), k([100]), k([-1])], {}, None),
    ("slice_steps", "Slice", [x(5, 6), k([4, 0]), k([0, 6]), k([0, 1]), k([-2, 2])], {},
     None),
    ("slice_steps_from_1", "Slice", [x(2, 8, 3), k([1, 0]), k([8, 3]), k([1, 2]), k([2, 2])],
     {}, None),
    ("slice_step_3_inside", "Slice", [x(2, 10), k([2]), k([8]), k([1]), k([3])], {}, None),
    ("slice_step_3_to_end", "Slice", [x(3, 8), k([1]), k([100]), k([1]), k([3])], {}, None),
    ("gather_rows", "Gather", [x(5, 3), data(np.array([[0, 2], [2, 4], [0, 0]]))], {}, None),
    ("gather_axis1", "Gather", [x(2, 5, 3), k(np.array([4, -1, 1]))], {"axis": 1}, None),
    ("reduce_sum", "ReduceSum", [x(2, 3, 4), k([1])], {"keepdims": 0}, None),
    ("reduce_sum_all", "ReduceSum", [x(2, 3, 4)], {"keepdims": 1}, None),
    ("reduce_mean", "ReduceMean", [x(2, 3, 4), k([0, 2])], {}, None),
    ("reduce_max", "ReduceMax", [x(2, 3, 4), k([-1])], {"keepdims": 0}, None),
    # Products, convolution, pooling, normalization.
    ("matmul", "MatMul", [x(3, 4), x(4, 5)], {}, None),
    ("matmul_batched", "MatMul", [x(2, 3, 4), x(4, 5)], {}, None),
    ("matmul_both_batched", "MatMul", [x(2, 3, 4), x(2, 4, 5)], {}, None),
    ("gemm", "Gemm", [x(4, 3), x(5, 4), x(5)],
     {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0}, None),
    ("gemm_no_c", "Gemm", [x(3, 4), x(4, 5)], {}, None),
    ("conv", "Conv", [x(2, 3, 6, 5), x(4, 3, 3, 3), x(4)], {"pads": [1, 1, 1, 1]}, None),
    ("conv_strided_dilated", "Conv", [x(1, 2, 9, 8), x(3, 2, 2, 3)],
     {"strides": [2, 2], "dilations": [2, 1], "pads": [0, 1, 1, 0]}, None),
    ("conv_groups", "Conv", [x(2, 4, 5, 5), x(6, 2, 3, 3), x(6)],
     {"group": 2, "strides": [2, 1], "pads": [1, 0, 1, 2]}, None),
    ("conv_1d_same", "Conv", [x(2, 2, 7), x(3, 2, 4)], {"auto_pad": "SAME_UPPER"}, None),
    ("conv_transpose", "ConvTranspose", [x(2, 3, 4, 5), x(3, 2, 3, 3), x(2)],
     {"strides": [2, 2], "pads": [1, 0, 0, 1], "output_padding": [1, 0]}, None),
    ("conv_transpose_groups_dilated", "ConvTranspose", [x(1, 4, 3, 4), x(4, 3, 2, 3)],
     {"group": 2, "dilations": [2, 1], "strides": [1, 2]}, None),
    ("conv_transpose_output_shape", "ConvTranspose", [x(1, 2, 5), x(2, 3, 4)],
     {"strides": [2], "output_shape": [9]}, None),
    ("conv_transpose_same_upper", "ConvTranspose", [x(1, 2, 3, 3), x(2, 2, 3, 3)],
     {"strides": [2, 2], "auto_pad": "SAME_UPPER"}, None),
    ("maxpool", "MaxPool", [x(2, 3, 7, 6)],
     {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, None),
    ("maxpool_ceil", "MaxPool", [x(1, 2, 6, 6)],
     {"kernel_shape": [3, 2], "strides": [2, 2], "ceil_mode": 1}, None),
    ("maxpool_1d_asymmetric", "MaxPool", [x(2, 3, 9)],
     {"kernel_shape": [3], "strides": [2], "pads": [0, 2]}, None),
    ("maxpool_3d_dilated", "MaxPool", [x(1, 2, 5, 5, 4)],
     {"kernel_shape": [2, 2, 2], "dilations": [2, 1, 1], "strides": [1, 2, 1]}, None),
    ("avgpool", "AveragePool", [x(2, 3, 6, 5)],
     {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 1, 1]}, None),
    ("avgpool_include_pad", "AveragePool", [x(2, 3, 6, 5)],
     {"kernel_shape": [3, 3], "strides": [1, 2], "pads": [1, 1, 1, 1],
      "count_include_pad": 1}, None),
    ("global_avgpool", "GlobalAveragePool", [x(2, 3, 4, 5)], {}, None),
    ("resize_linear_scales", "Resize",
     [x(2, 3, 5, 4), None, k(np.array([1, 1, 1.6, 0.75], np.float32))],
     {"mode": "linear", "coordinate_transformation_mode": "half_pixel"}, None),
    ("resize_cubic_sizes_antialias", "Resize", [x(2, 3, 5, 4), None, None, k([2, 3, 7, 3])],
     {"mode": "cubic", "antialias": 1, "coordinate_transformation_mode": "half_pixel"}, None),
    ("resize_linear_align_corners", "Resize", [x(1, 2, 4, 6), None, None, k([1, 2, 9, 4])],
     {"mode": "linear", "coordinate_transformation_mode": "align_corners"}, None),
    ("resize_nearest_axes", "Resize",
     [x(2, 3, 5, 4), k(np.zeros(0, np.float32)), k(np.array([2.0, 0.5], np.float32))],
     {"mode": "nearest", "axes": [2, -1], "nearest_mode": "round_prefer_floor",
      "coordinate_transformation_mode": "asymmetric"}, None),
    ("softmax", "Softmax", [x(3, 5)], {}, None),
    ("softmax_axis1", "Softmax", [x(2, 4, 3)], {"axis": 1}, None),
    ("log_softmax", "LogSoftmax", [x(3, 5)], {"axis": -1}, None),
    ("layer_norm", "LayerNormalization", [x(3, 6), x(6), x(6)], {"epsilon": 1e-5}, ([0], 1)),
    ("layer_norm_axis1", "LayerNormalization", [x(2, 3, 4), x(3, 4), x(4)], {"axis": 1},
     ([0], 1)),
    ("layer_norm_broadcast_scale", "LayerNormalization", [x(2, 3, 4), x(4), x(1, 4)],
     {"axis": 1}, ([0], 1)),
    ("batch_norm", "BatchNormalization", [x(4, 3, 2, 2), x(3), x(3), x(3), pos(3)], {},
     None),
    ("batch_norm_training", "BatchNormalization", [x(4, 3, 2, 2), x(3), x(3), k(np.zeros(3)),
                                                   k(np.ones(3))],
     {"training_mode": 1}, ([0], 3)),
    # Losses.
    ("mse_loss", "MSELoss", [x(3, 4), x(3, 4)], {"reduction": "mean"}, None),
    ("xent", "SoftmaxCrossEntropyLoss", [x(2, 3, 5), data(np.array([[0, 4, 2], [1, 1, 3]]))],
     {}, None),
]
# Ops added beside this work (their forward rules come from the ONNX-ops session).
MORE: list[tuple[str, str, list, dict, Any]] = [
    ("hard_sigmoid", "HardSigmoid", [x(3, 4)], {"alpha": 0.3, "beta": 0.4}, None),
    ("elu", "Elu", [x(3, 4)], {"alpha": 0.7}, None),
    ("selu", "Selu", [x(3, 4)], {}, None),
    ("mish", "Mish", [x(3, 4)], {}, None),
    ("prelu", "PRelu", [x(2, 3, 4), x(3, 1)], {}, None),
    ("atan", "Atan", [x(3, 4)], {}, None),
    ("cast_like", "CastLike", [x(3, 4), k(np.zeros(1))], {}, None),
    ("floor", "Floor", [x(3, 4)], {}, None),
    ("reduce_min", "ReduceMin", [x(2, 3, 4), k([1])], {}, None),
    ("reduce_sum_square", "ReduceSumSquare", [x(2, 3, 4), k([1, 2])], {"keepdims": 0}, None),
    ("reduce_l1", "ReduceL1", [x(2, 3, 4), k([2])], {}, None),
    ("reduce_l2", "ReduceL2", [x(2, 3, 4), k([0])], {"keepdims": 0}, None),
    ("reduce_log_sum_exp", "ReduceLogSumExp", [x(2, 3, 4), k([1])], {}, None),
    ("reduce_prod", "ReduceProd", [pos(2, 3, 4), k([2])], {}, None),
    ("pad", "Pad", [x(2, 3, 4), k([1, 0, 2, 0, 1, 3])], {}, None),
    ("pad_axes", "Pad", [x(2, 3, 4), k([2, 1]), k(1.5), k([-1])], {}, None),
    ("pad_crop", "Pad", [x(2, 3, 4), k([0, 1, -1, 0, -1, 2])], {}, None),
    ("pad_crop_axes", "Pad", [x(2, 5, 4), k([1, -1]), k(0.5), k([1])], {}, None),
    ("tile", "Tile", [x(2, 3), k([3, 2])], {}, None),
    ("trilu", "Trilu", [x(2, 4, 4), k(1)], {"upper": 0}, None),
    ("depth_to_space_dcr", "DepthToSpace", [x(1, 8, 2, 3)], {"blocksize": 2}, None),
    ("depth_to_space_crd", "DepthToSpace", [x(1, 8, 2, 3)], {"blocksize": 2, "mode": "CRD"},
     None),
    ("space_to_depth", "SpaceToDepth", [x(1, 2, 4, 6)], {"blocksize": 2}, None),
    ("col2im_tiles", "Col2Im", [x(2, 12, 9), k([6, 6]), k([2, 2])], {"strides": [2, 2]},
     None),
    ("col2im_overlapping", "Col2Im", [x(1, 12, 12), k([5, 4]), k([2, 3])],
     {"dilations": [2, 1], "pads": [1, 0, 0, 1]}, None),
    ("col2im_1d", "Col2Im", [x(2, 6, 4), k([6]), k([3])], {}, None),
    ("gather_elements", "GatherElements", [x(3, 4), data(np.array([[0, 3], [2, 2], [1, 0]]))],
     {"axis": 1}, None),
    ("gather_nd", "GatherND", [x(3, 4, 2), data(np.array([[0, 1], [2, 3], [0, 1]]))], {},
     None),
    ("scatter_nd", "ScatterND", [x(4, 3), data(np.array([[1], [3]])), x(2, 3)], {}, None),
    ("scatter_elements_add", "ScatterElements",
     [x(3, 4), data(np.array([[0, 1], [3, 3], [2, 0]])), x(3, 2)],
     {"axis": 1, "reduction": "add"}, None),
    ("top_k", "TopK", [x(3, 5), k([2])], {}, ([0], 2)),
    ("cum_sum", "CumSum", [x(3, 4), k(1)], {"exclusive": 1}, None),
    ("cum_sum_reverse", "CumSum", [x(3, 4), k(0)], {"reverse": 1}, None),
    ("instance_norm", "InstanceNormalization", [x(2, 3, 4, 2), x(3), x(3)], {}, None),
    ("group_norm", "GroupNormalization", [x(2, 4, 3, 2), x(4), x(4)], {"num_groups": 2},
     None),
    ("einsum_bmm", "Einsum", [x(2, 3, 4), x(2, 4, 5)], {"equation": "bij,bjk->bik"}, None),
    ("einsum_implicit_sum", "Einsum", [x(3, 4), x(4, 2)], {"equation": "ij,jk"}, None),
    ("einsum_own_axis", "Einsum", [x(3, 4, 2), x(4)], {"equation": "ijk,j->i"}, None),
    ("tan", "Tan", [x(3, 4)], {}, None),
    ("sinh", "Sinh", [x(3, 4)], {}, None),
    ("cosh", "Cosh", [x(3, 4)], {}, None),
    ("asin", "Asin", [x(3, 4)], {}, None),
    ("acos", "Acos", [x(3, 4)], {}, None),
    ("atanh", "Atanh", [x(3, 4)], {}, None),
    ("asinh", "Asinh", [x(3, 4)], {}, None),
    ("acosh", "Acosh", [x(3, 4)], {}, None),
    ("celu", "Celu", [x(3, 4)], {"alpha": 0.8}, None),
    ("softsign", "Softsign", [x(3, 4)], {}, None),
    ("thresholded_relu", "ThresholdedRelu", [x(3, 4)], {"alpha": 0.3}, None),
    ("shrink", "Shrink", [x(3, 4)], {"lambd": 0.4, "bias": 0.1}, None),
    ("mean3", "Mean", [x(3, 4), x(4), x(3, 1)], {}, None),
    ("hardmax", "Hardmax", [x(3, 4)], {}, None),
    ("reduce_log_sum", "ReduceLogSum", [pos(2, 3, 4), k([1])], {}, None),
    ("global_max_pool", "GlobalMaxPool", [x(2, 3, 4, 5)], {}, None),
    ("lp_norm_2", "LpNormalization", [x(3, 5)], {"axis": 1, "p": 2}, None),
    ("lp_norm_1", "LpNormalization", [x(2, 3, 4)], {"axis": 1, "p": 1}, None),
]
# Inputs inside the domains of Asin/Acos/Atanh (|x| < 1) and Acosh (x > 1).
DOMAIN = {"Asin": lambda v: np.tanh(v) * 0.9, "Acos": lambda v: np.tanh(v) * 0.9,
          "Atanh": lambda v: np.tanh(v) * 0.9, "Acosh": lambda v: 1.5 + np.abs(v)}
CASES += [c for c in MORE if c[1] in SCHEMAS]

# onnx.reference's Erf is exact to about 1e-8 only: wider steps, the spec's tolerance.
# Its GroupNormalization keeps the statistics in float32 (stash_type=1): checked against
# torch in float64 below as well.
LOOSE = {"Erf": (1e-3, 1e-4), "Gelu": (1e-3, 1e-4), "GroupNormalization": (1e-3, 1e-3)}
if "HardSwish" in SCHEMAS:
    CASES.append(("hard_swish", "HardSwish", [x(4, 5)], {}, None))


def make_case(case: tuple) -> tuple[Function, list[np.ndarray], list[str]]:
    """A case's function, inputs (moved into the op's domain) and differentiated names."""
    _, op_type, specs, attrs, extra = case
    use, n_out = (None, extra) if isinstance(extra, int) else (extra or (None, None))
    fn, vals, names = build(op_type, specs, attrs, use=use, n_out=n_out)
    if op_type == "HardSwish":  # keep the inputs off the kinks at +-3
        vals = [v * 2.0 for v in vals]
    if op_type in DOMAIN:
        vals = [DOMAIN[op_type](v) for v in vals]
    return fn, vals, names


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_vjp_rule_matches_finite_differences(case: tuple) -> None:
    fn, vals, names = make_case(case)
    eps, rtol = LOOSE.get(case[1], (1e-4, 1e-6))
    check_grad(fn, vals, names, eps=eps, rtol=rtol)


def test_the_rules_cover_the_differentiable_ops() -> None:
    load_vjp_rules()
    wanted = ("MatMul Gemm Conv BatchNormalization LayerNormalization Softmax LogSoftmax "
              "Gather Where Expand Reshape Transpose Slice Concat Split Squeeze Unsqueeze "
              "Flatten Add Sub Mul Div Pow Sqrt Exp Log Erf Tanh Sigmoid Relu Gelu HardSwish "
              "ReduceMean ReduceSum ReduceMax MaxPool AveragePool GlobalAveragePool Dropout "
              "Cast Identity Neg").split()
    assert [op for op in wanted if op not in VJP_RULES] == []
    # Cast has its own test; Ceil, Round and Sign share Floor's rule.
    tested = {c[1] for c in CASES} | {"Cast", "HardSwish", "Ceil", "Round", "Sign",
                                      "MeanVarianceNormalization"}
    assert set(VJP_RULES.rules) <= tested


@pytest.mark.skipif("GroupNormalization" not in SCHEMAS, reason="op not in this tree")
@pytest.mark.parametrize("groups", [1, 2, 4])
def test_group_norm_matches_torch_in_float64(groups: int) -> None:
    import torch
    fn, vals, names = build("GroupNormalization", [x(2, 4, 3, 2), x(4), x(4)],
                            {"num_groups": groups})
    outs = distir.execute(grad(fn, names), vals)
    ts = [torch.tensor(v, requires_grad=True) for v in vals]
    r = next(op for op in fn.ops if op.op_type == "Constant").attrs["value"].array
    y = torch.nn.functional.group_norm(ts[0], groups, ts[1], ts[2], eps=1e-5)
    (y * torch.tensor(r)).sum().backward()
    for got, t in zip(outs[1:], ts):
        np.testing.assert_allclose(got, t.grad.numpy(), rtol=1e-9, atol=1e-10)


@pytest.mark.skipif("MeanVarianceNormalization" not in SCHEMAS, reason="op not in this tree")
def test_mean_variance_normalization_matches_torch() -> None:
    """In float32 (onnx.reference's MeanVarianceNormalization takes no float64)."""
    import torch
    b = FunctionBuilder("main")
    xp = b.param("x", TensorType(DType.Float32, (2, 3, 4, 2), 0))
    rng = np.random.default_rng(0)
    r = rng.standard_normal((2, 3, 4, 2)).astype(np.float32)
    y = b.op("MeanVarianceNormalization", xp)
    fn = b.ret(b.op("ReduceSum", b.op("Mul", y, b.op("Constant", value=r, device=0)),
                    keepdims=0))
    xv = rng.standard_normal((2, 3, 4, 2)).astype(np.float32)
    (got,) = distir.execute(grad(fn, ["x"]), [xv])[1:]
    t = torch.tensor(xv, requires_grad=True)
    xc = t - t.mean(dim=(0, 2, 3), keepdim=True)
    yt = xc / ((xc * xc).mean(dim=(0, 2, 3), keepdim=True).sqrt() + 1e-9)
    (yt * torch.tensor(r)).sum().backward()
    np.testing.assert_allclose(got, t.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_a_value_used_twice_gets_the_sum() -> None:
    b = FunctionBuilder("main")
    a = b.param("a", TensorType(F64, (3,), 0))
    sq = b.op("Mul", a, a)
    s = b.op("ReduceSum", b.op("Add", sq, a), keepdims=0)
    g = grad(b.ret(s), ["a"])
    av = np.array([1.0, -2.0, 0.5])
    np.testing.assert_allclose(distir.execute(g, [av])[1], 2 * av + 1)


def test_cast_round_trip_in_float32() -> None:
    b = FunctionBuilder("main")
    a = b.param("a", TensorType(DType.Float32, (3,), 0))
    c = b.op("Cast", b.op("Mul", a, a), to=F64)
    s = b.op("ReduceSum", c, keepdims=0)
    g = grad(b.ret(s), ["a"])
    av = np.array([1.0, -2.0, 0.5], np.float32)
    (gv,) = distir.execute(g, [av])[1:]
    assert gv.dtype == np.float32
    np.testing.assert_allclose(gv, 2 * av)


def test_integer_paths_get_no_gradient_and_cost_nothing() -> None:
    """The Shape -> Gather -> Concat chain that computes a Reshape target is not
    differentiated: the gradient program has no op on it beyond the forward's."""
    b = FunctionBuilder("main")
    xv = b.param("x", TensorType(DType.Float32, (2, 3, 4), 0))
    shp = b.op("Shape", xv)
    first = b.op("Gather", shp, b.op("Constant", value=np.array([0]), device=0))
    tgt = b.op("Concat", first, b.op("Constant", value=np.array([-1]), device=0), axis=0)
    y = b.op("Reshape", b.op("Tanh", xv), tgt)
    s = b.op("ReduceSum", y, keepdims=0)
    g = grad(b.ret(s), ["x"])
    kinds = [op.op_type for op in g.ops]
    assert kinds.count("Shape") == 1 and kinds.count("Gather") == 1
    assert kinds.count("Concat") == 1
    assert "ScatterND" not in kinds


def test_default_wrt_is_the_float_initializers_and_zero_for_unused() -> None:
    b = FunctionBuilder("main")
    w = b.param("w", TensorType(DType.Float32, (3,), 0))
    u = b.param("u", TensorType(DType.Float32, (2,), 0))
    xv = b.param("x", TensorType(DType.Float32, (3,), 0))
    s = b.op("ReduceSum", b.op("Mul", w, xv), keepdims=0)
    fn = b.ret(s, u)
    fn.initializers = {"w": np.ones(3, np.float32), "u": np.zeros(2, np.float32)}
    g = grad(fn)
    assert g.initializers.keys() == fn.initializers.keys()
    loss, gw, gu = distir.execute(g, [np.array([1.0, 2.0, 3.0], np.float32)])
    assert loss == 6.0
    np.testing.assert_array_equal(gw, [1, 2, 3])
    np.testing.assert_array_equal(gu, [0, 0])


def test_default_wrt_leaves_out_an_exporters_scalar_constants() -> None:
    """A 0-d initializer (torch's dynamo exporter stores the forward pass's scalars so) is
    a constant by default: here the exponent of a Pow, whose gradient is NaN for negative
    bases; named in wrt, it is differentiated."""
    b = FunctionBuilder("main")
    w = b.param("w", TensorType(DType.Float32, (3,), 0))
    e = b.param("e", TensorType(DType.Float32, (), 0))
    xv = b.param("x", TensorType(DType.Float32, (3,), 0))
    fn = b.ret(b.op("ReduceSum", b.op("Pow", b.op("Mul", w, xv), e), keepdims=0))
    fn.initializers = {"w": np.ones(3, np.float32), "e": np.array(3.0, np.float32)}
    assert default_wrt(fn) == ["w"]
    x = np.array([-1.0, 2.0, 3.0], np.float32)
    loss, gw = distir.execute(grad(fn), [x])
    assert loss == 34.0 and np.isfinite(gw).all()
    np.testing.assert_allclose(gw, 3 * x ** 3)
    _, _, ge = distir.execute(grad(fn, wrt=["w", "e"]), [x])
    assert np.isnan(ge)  # x^e·log x at x = -1


def _simple() -> Function:
    b = FunctionBuilder("main")
    a = b.param("a", TensorType(DType.Float32, (3, 4), 0))
    i = b.param("i", TensorType(DType.Int64, (2,), 0))
    return b.ret(b.op("Relu", a), i)


@pytest.mark.parametrize("wrt,pattern", [
    (["nope"], r"wrt names %nope, which is not a parameter of @main"),
    ("a", r"wrt must be a list of parameter names.*write wrt=\['a'\]"),
])
def test_bad_wrt_is_one_line(wrt: Any, pattern: str) -> None:
    with pytest.raises(TransformError, match=pattern) as e:
        grad(_simple(), wrt)
    assert "\n" not in str(e.value)


def test_non_scalar_loss_is_one_line() -> None:
    with pytest.raises(TransformError, match=r"first result of @main must be a floating-point "
                       r"scalar loss.*reduce it first") as e:
        grad(_simple(), ["a"])
    assert "\n" not in str(e.value)


def test_op_without_a_vjp_rule_is_one_line() -> None:
    b = FunctionBuilder("main")
    a = b.param("a", TensorType(DType.Float32, (3, 4), 0))
    y = b.op("LRN", b.op("Reshape", a, b.op("Constant", value=np.array([1, 3, 4, 1]),
                                              device=0)), size=3, name="normed")
    fn = b.ret(b.op("ReduceSum", y, keepdims=0))
    with pytest.raises(DistIRError, match=r"no VJP rule for op LRN \(result %normed\).*"
                       r"distir/transforms/vjp/") as e:
        grad(fn, ["a"])
    assert "\n" not in str(e.value)
