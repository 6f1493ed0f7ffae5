"""Every lowering against the reference executor, one op at a time, in this process.

Each case builds a one-op function (constant operands as ``Constant`` ops), projects it to
device 0, compiles it for the CPU and compares its results with ``distir.execute``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import distir  # noqa: E402
from distir.analysis.projection import project  # noqa: E402
from distir.backend.lowering import LOWERINGS, compile_program, load_lowerings  # noqa: E402
from distir.backend.worker import to_torch  # noqa: E402
from distir.errors import UnsupportedError  # noqa: E402
from distir.ir import DType, FunctionBuilder, TensorType  # noqa: E402

F32, F16, I64, BOOL = DType.Float32, DType.Float16, DType.Int64, DType.Bool


def run_local(fn: Any, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Run a one-device function through projection and lowering, on the CPU."""
    proj = project(fn)
    assert proj.world_size == 1
    prog = compile_program(proj.programs[0], torch.device("cpu"))
    with torch.inference_mode():
        outs = prog.run([to_torch(a, "cpu") for a in inputs])
    return [o.numpy() for o in outs]


def one_op(op: str, specs: list[Any], n_out: int = 1, **attrs: Any) -> Any:
    """A function applying ``op``: each spec is a ``(dtype, shape)`` parameter or a numpy
    array (a ``Constant``); ``None`` omits an optional input."""
    b = FunctionBuilder("f")
    args: list[Any] = []
    for i, s in enumerate(specs):
        if s is None:
            args.append(None)
        elif isinstance(s, np.ndarray):
            args.append(b.op("Constant", value=s, name=f"c{i}"))
        else:
            args.append(b.param(f"x{i}", TensorType(s[0], tuple(s[1]), 0)))
    outs = b.op(op, *args, num_results=n_out, **attrs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    return b.ret(*outs)


def random_for(fn: Any, seed: int = 0, positive: bool = False) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for p in fn.params:
        t = p.type
        if t.dtype is BOOL:
            out.append(rng.integers(0, 2, t.shape).astype(bool))
        elif t.dtype.is_float:
            a = rng.standard_normal(t.shape)
            out.append((np.abs(a) + 0.1 if positive else a).astype(t.dtype.np))
        else:
            out.append(rng.integers(0, 5, t.shape).astype(t.dtype.np))
    return out


def check(fn: Any, inputs: list[np.ndarray] | None = None, *, rtol: float = 1e-5,
          atol: float = 1e-5, positive: bool = False) -> None:
    if inputs is None:
        inputs = random_for(fn, positive=positive)
    ref = distir.execute(fn, inputs)
    got = run_local(fn, inputs)
    assert len(ref) == len(got)
    for r, g in zip(ref, got):
        assert g.shape == r.shape, (g.shape, r.shape)
        assert g.dtype == r.dtype, (g.dtype, r.dtype)
        if r.dtype == bool or not np.issubdtype(r.dtype, np.floating):
            np.testing.assert_array_equal(g, r)
        else:
            np.testing.assert_allclose(g.astype(np.float64), r.astype(np.float64), rtol=rtol,
                                       atol=atol)


X = (F32, (3, 4))

UNARY = ["Abs", "Neg", "Exp", "Relu", "Sigmoid", "Tanh", "Erf", "Identity", "Floor", "Ceil",
         "Sin", "Cos"]


@pytest.mark.parametrize("op", UNARY)
def test_unary(op: str) -> None:
    check(one_op(op, [X]))


@pytest.mark.parametrize("op", ["Log", "Sqrt", "Reciprocal"])
def test_unary_positive(op: str) -> None:
    check(one_op(op, [X]), positive=True)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(approximate: str) -> None:
    check(one_op("Gelu", [X], approximate=approximate))


def test_leaky_relu_and_not() -> None:
    check(one_op("LeakyRelu", [X], alpha=0.2))
    check(one_op("Not", [(BOOL, (5,))]))


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 5))])
def test_binary_broadcast(op: str, shapes: tuple) -> None:
    check(one_op(op, [(F32, shapes[0]), (F32, shapes[1])]), positive=op == "Div")


@pytest.mark.parametrize("op", ["Add", "Mul", "Div", "Sub"])
def test_binary_with_known_scalar(op: str) -> None:
    check(one_op(op, [X, np.array(2.5, np.float32)]))
    check(one_op(op, [np.array([0.5], np.float32), X]))


def test_integer_division_truncates() -> None:
    fn = one_op("Div", [(I64, (6,)), (I64, (6,))])
    check(fn, [np.array([7, -7, 9, -9, 1, 0]), np.array([2, 2, -4, 4, 3, 5])])


def test_pow() -> None:
    check(one_op("Pow", [X, np.array(2.0, np.float32)]))
    check(one_op("Pow", [X, np.array(3.0, np.float32)]))
    check(one_op("Pow", [X, (F32, (3, 4))]), positive=True)


def test_known_inputs_are_compiled_in() -> None:
    """A run's small operands given by the caller (a dynamo export's 0-d exponent, an
    integer shape) are compiled in as constants (``known_inputs``): the kernel then uses
    the known value, as for a ``Constant``; weights and random inputs never are."""
    from distir.backend.lowering import known_inputs

    fn = one_op("Pow", [X, (F32, ())])
    x = np.abs(random_for(fn)[0]) + 0.5
    three = np.array(3.0, np.float32)
    known = known_inputs([None, three])
    assert list(known) == [1] and known[1] == 3.0
    prog = compile_program(project(fn).programs[0], torch.device("cpu"), known=known)
    with torch.inference_mode():  # a different tensor at run time: the compiled value wins
        (got,) = prog.run([to_torch(x, "cpu"), to_torch(np.array(2.0, np.float32), "cpu")])
    np.testing.assert_allclose(got.numpy(), x ** 3, rtol=1e-6)
    check(fn, [x, three])  # and the result is the reference's
    shape = np.array([4, 3], np.int64)
    weight = np.ones((3, 4), np.float32)
    assert set(known_inputs([weight, shape, None, np.ones(100, np.int64)])) == {1}


@pytest.mark.parametrize("op", ["Sum", "Max", "Min"])
def test_variadic(op: str) -> None:
    check(one_op(op, [(F32, (2, 3)), (F32, (3,)), (F32, (2, 1))]))
    check(one_op(op, [(F32, (2, 3))]))


@pytest.mark.parametrize("op", ["Equal", "Less", "Greater"])
def test_compare(op: str) -> None:
    fn = one_op(op, [(I64, (4, 3)), (I64, (3,))])
    check(fn)


def test_where_and_cast() -> None:
    check(one_op("Where", [(BOOL, (3, 4)), X, (F32, (4,))]))
    # A known single-element branch is passed to torch.where as a number, either side.
    check(one_op("Where", [(BOOL, (4,)), np.array(-1e4, np.float32), X]))
    check(one_op("Where", [(BOOL, (3, 4)), X, np.array([-np.inf], np.float32)]))
    check(one_op("Where", [(BOOL, (3, 4)), np.array(2, np.int64), (I64, (3, 4))]))
    check(one_op("Cast", [X], to=I64), [np.array([[1.7, -1.7, 0.2, -0.2]] * 3, np.float32)])
    check(one_op("Cast", [X], to=F16), rtol=1e-3)
    check(one_op("Cast", [X], to=F32))


def test_shapes() -> None:
    check(one_op("Reshape", [(F32, (2, 3, 4)), np.array([6, -1], np.int64)]))
    check(one_op("Flatten", [(F32, (2, 3, 4))], axis=2))
    check(one_op("Squeeze", [(F32, (2, 1, 4)), np.array([1], np.int64)]))
    check(one_op("Unsqueeze", [(F32, (2, 4)), np.array([0, 3], np.int64)]))
    check(one_op("Expand", [(F32, (3, 1)), np.array([2, 3, 4], np.int64)]))
    check(one_op("Transpose", [(F32, (2, 3, 4))], perm=[2, 0, 1]))
    check(one_op("Transpose", [(F32, (2, 3, 4))]))
    check(one_op("Tile", [(F32, (2, 3)), np.array([2, 1], np.int64)]))
    check(one_op("Trilu", [(F32, (4, 4)), np.array(1, np.int64)], upper=0))


def test_a_transpose_of_unit_axes_is_a_contiguous_reshape() -> None:
    """Moving only axes of length 1 moves no element: the result has the strides of a
    contiguous tensor, so that ``torch.matmul`` folds it into one product (a ``permute``
    view keeps the moved axis's stride, and matmul then runs one matrix-vector product per
    row: 8x on an H200 for nn.MultiheadAttention's microbatch of one sequence)."""
    for shape, perm in (((1, 5, 4), [1, 0, 2]), ((5, 1, 4), [1, 0, 2]), ((4, 1), None),
                        ((1, 3, 1, 4), [2, 1, 0, 3])):
        fn = one_op("Transpose", [(F32, shape)], perm=perm) if perm else \
            one_op("Transpose", [(F32, shape)])
        check(fn)
        prog = compile_program(project(fn).programs[0], torch.device("cpu"))
        x = torch.randn(shape)
        (y,) = prog.run([x])
        assert y.stride() == torch.empty(y.shape).stride(), (shape, perm, y.stride())
    w = torch.randn(4, 6)
    (y,) = compile_program(project(one_op("Transpose", [(F32, (1, 5, 4))], perm=[1, 0, 2]))
                           .programs[0], torch.device("cpu")).run([torch.randn(1, 5, 4)])
    assert torch.equal(torch.matmul(y, w), (y.reshape(5, 4) @ w).reshape(5, 1, 6))


def test_split_and_concat() -> None:
    check(one_op("Split", [(F32, (6, 4))], n_out=3, axis=0, num_outputs=3))
    check(one_op("Split", [(F32, (2, 7)), np.array([2, 5], np.int64)], n_out=2, axis=-1))
    check(one_op("Concat", [(F32, (2, 3)), (F32, (2, 1)), (F32, (2, 2))], axis=1))


def test_gather() -> None:
    check(one_op("Gather", [(F32, (5, 3)), (I64, (2, 4))], axis=0))
    check(one_op("Gather", [(F32, (2, 5, 3)), (I64, (4,))], axis=1))
    check(one_op("Gather", [(F32, (5, 3)), np.array([[0, -1], [4, 2]], np.int64)], axis=0))
    check(one_op("Gather", [(F32, (5, 3)), np.array(-2, np.int64)], axis=1))
    fn = one_op("Gather", [(F32, (5, 3)), (I64, (3,))], axis=0)
    check(fn, [np.ones((5, 3), np.float32) * np.arange(5, dtype=np.float32)[:, None],
               np.array([-1, 0, 3])])


def test_slice() -> None:
    i = lambda *v: np.array(v, np.int64)  # noqa: E731
    check(one_op("Slice", [(F32, (6, 5)), i(1, 0), i(5, 100), i(0, 1), i(2, 1)]))
    check(one_op("Slice", [(F32, (6, 5)), i(-1), i(-100), i(1), i(-2)]))
    check(one_op("Slice", [(F32, (6, 5)), i(2), i(-1)]))


def test_matmul_gemm() -> None:
    check(one_op("MatMul", [(F32, (3, 4)), (F32, (4, 5))]))
    check(one_op("MatMul", [(F32, (2, 3, 4)), (F32, (4, 5))]))
    check(one_op("MatMul", [(F32, (2, 2, 3, 4)), (F32, (2, 2, 4, 5))]), rtol=1e-4)
    check(one_op("Gemm", [(F32, (4, 3)), (F32, (5, 4)), (F32, (5,))], transA=1, transB=1,
                 alpha=0.5, beta=2.0), rtol=1e-4)
    check(one_op("Gemm", [(F32, (3, 4)), (F32, (4, 5))]), rtol=1e-4)


def test_softmax_norm_reduce() -> None:
    check(one_op("Softmax", [(F32, (2, 3, 5))], axis=1))
    check(one_op("LogSoftmax", [(F32, (2, 5))]))
    check(one_op("LayerNormalization", [(F32, (2, 3, 8)), (F32, (8,)), (F32, (8,))]),
          rtol=1e-4, atol=1e-5)
    check(one_op("LayerNormalization", [(F32, (2, 3, 8)), (F32, (3, 8)), None], n_out=3,
                 axis=1), rtol=1e-4, atol=1e-5)
    for op in ("ReduceSum", "ReduceMean", "ReduceMax"):
        check(one_op(op, [(F32, (2, 3, 4)), np.array([-1, 0], np.int64)], keepdims=0))
        check(one_op(op, [(F32, (2, 3, 4))]))
    check(one_op("ReduceSum", [(F32, (2, 3))], noop_with_empty_axes=1))


def test_conv_and_pools() -> None:
    x = (F32, (1, 4, 7, 7))
    check(one_op("Conv", [x, (F32, (6, 2, 3, 3)), (F32, (6,))], group=2, pads=[1, 0, 1, 2],
                 strides=[2, 1]), rtol=1e-4, atol=1e-5)
    check(one_op("Conv", [x, (F32, (2, 4, 2, 2))], auto_pad="SAME_UPPER"), rtol=1e-4,
          atol=1e-5)
    check(one_op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))
    check(one_op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[0, 1, 1, 0]))
    check(one_op("AveragePool", [x], kernel_shape=[3, 3], pads=[1, 1, 1, 1]), rtol=1e-5)
    check(one_op("AveragePool", [x], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                 count_include_pad=1), rtol=1e-5)
    check(one_op("AveragePool", [x], kernel_shape=[2, 2], pads=[0, 1, 1, 0]), rtol=1e-5)
    check(one_op("AveragePool", [(F32, (1, 4, 6, 6))], kernel_shape=[3, 3], strides=[2, 2],
                 pads=[1, 1, 1, 1], ceil_mode=1), rtol=1e-5)  # (pads left out: padded sums)
    check(one_op("GlobalAveragePool", [x]))


def test_batchnorm_and_lrn() -> None:
    c = (F32, (4,))
    fn = one_op("BatchNormalization", [(F32, (2, 4, 3, 3)), c, c, c, c])
    ins = random_for(fn)
    ins[4] = np.abs(ins[4]) + 0.5
    check(fn, ins, rtol=1e-4, atol=1e-5)
    # Batch == channels: onnx.reference's LRN loops over the batch where the spec says
    # channels, and agrees with the spec only then.
    for size in (3, 4):
        check(one_op("LRN", [(F32, (4, 4, 2, 2))], size=size, alpha=0.1), rtol=1e-4, atol=1e-6)


def test_lrn_follows_the_spec() -> None:
    size, alpha, beta, bias = 4, 0.1, 0.75, 1.0
    fn = one_op("LRN", [(F32, (2, 6, 3, 3))], size=size, alpha=alpha, beta=beta, bias=bias)
    (x,) = random_for(fn)
    sq = np.zeros_like(x)
    for c in range(6):  # the ONNX spec's window: [c - floor((s-1)/2), c + ceil((s-1)/2)]
        lo, hi = max(0, c - (size - 1) // 2), min(5, c + -(-(size - 1) // 2))
        sq[:, c] = (x[:, lo:hi + 1] ** 2).sum(axis=1)
    want = x / (bias + alpha / size * sq) ** beta
    np.testing.assert_allclose(run_local(fn, [x])[0], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shapes", [((4, 3), (3, 5)), ((2, 4, 3), (3, 5)),
                                    ((2, 4, 3), (2, 3, 5)), ((3,), (3, 5)), ((4, 3), (3,))])
def test_matmul_grad(shapes: tuple) -> None:
    a, b = shapes
    y = np.matmul(np.zeros(a), np.zeros(b)).shape
    check(one_op("MatMulGrad", [(F32, a), (F32, b), (F32, y)], n_out=2), rtol=1e-4, atol=1e-5)


def test_training_ops() -> None:
    check(one_op("GemmGrad", [(F32, (4, 3)), (F32, (5, 4)), (F32, (5,)), (F32, (3, 5))],
                 n_out=3, transA=1, transB=1, alpha=0.5, beta=2.0), rtol=1e-4, atol=1e-5)
    check(one_op("ReluGrad", [X, X]))
    for approx in ("none", "tanh"):
        check(one_op("GeluGrad", [X, X], approximate=approx), rtol=1e-4, atol=1e-6)
    for red in ("sum", "mean"):
        check(one_op("MSELoss", [X, X], reduction=red), rtol=1e-5)
        check(one_op("MSELossGrad", [X, X], reduction=red))
        fn = one_op("SoftmaxCrossEntropyLoss", [(F32, (2, 3, 5)), (I64, (2, 3))], reduction=red)
        check(fn, rtol=1e-5)
        fn = one_op("SoftmaxCrossEntropyLossGrad", [(F32, (2, 3, 5)), (I64, (2, 3))],
                    reduction=red)
        check(fn, rtol=1e-5, atol=1e-6)
    check(one_op("SGDOptimizer", [X, X], lr=0.1))


@pytest.mark.parametrize("known_step", [True, False])
def test_adam(known_step: bool) -> None:
    step: Any = np.array(3, np.int64) if known_step else (I64, ())
    fn = one_op("AdamOptimizer", [X, X, X, X, step], n_out=3, lr=0.01, weight_decay=0.1)
    ins = random_for(fn)
    ins[3] = np.abs(ins[3])  # v is a second moment
    if not known_step:
        ins[4] = np.array(3, np.int64)
    check(fn, ins, rtol=1e-5, atol=1e-6)


def test_half_precision_matmul_and_softmax() -> None:
    check(one_op("MatMul", [(F16, (8, 16)), (F16, (16, 4))]), rtol=2e-2, atol=2e-2)
    check(one_op("Softmax", [(F16, (4, 8))]), rtol=1e-2, atol=1e-3)


@pytest.mark.parametrize("red", ["sum", "mean"])
def test_half_precision_cross_entropy(red: str) -> None:
    """Half logits go to the softmax kernels as they are (no float32 copy): the loss and
    its gradient stay within the half type's rounding of the reference's float32 ones."""
    logits = (F16, (4, 6, 50))
    check(one_op("SoftmaxCrossEntropyLoss", [logits, (I64, (4, 6))], reduction=red),
          rtol=2e-3, atol=2e-3)
    check(one_op("SoftmaxCrossEntropyLossGrad", [logits, (I64, (4, 6))], reduction=red),
          rtol=1e-2, atol=2e-4)


def test_dead_gradient_is_not_computed() -> None:
    b = FunctionBuilder("f")
    a = b.param("a", TensorType(F32, (4, 3), 0))
    w = b.param("w", TensorType(F32, (3, 5), 0))
    dy = b.param("dy", TensorType(F32, (4, 5), 0))
    _, dw = b.op("MatMulGrad", a, w, dy, name=("_", "dw"))
    fn = b.ret(dw)
    proj = project(fn)
    prog = compile_program(proj.programs[0], torch.device("cpu"))
    ins = [to_torch(x, "cpu") for x in random_for(fn)]
    res = prog.steps[0].kernel(*ins)
    assert res[0] is None and res[1].shape == (3, 5)
    check(fn)


def test_every_spec_op_has_a_lowering() -> None:
    load_lowerings()
    spec = ("Abs Add AveragePool BatchNormalization Cast Concat Constant ConstantOfShape Conv "
            "Div Dropout Equal Erf Exp Expand Flatten Gather Gelu Gemm GlobalAveragePool "
            "Identity LayerNormalization Less Log LRN MatMul Max MaxPool Mul Neg Not Pow Range "
            "Reciprocal ReduceMean ReduceSum Relu Reshape Shape Sigmoid Slice Softmax Split "
            "Sqrt Squeeze Sub Sum Tanh Transpose Unsqueeze Where MatMulGrad GemmGrad ReluGrad "
            "GeluGrad MSELoss MSELossGrad SoftmaxCrossEntropyLoss SoftmaxCrossEntropyLossGrad "
            "SGDOptimizer AdamOptimizer Send Recv MPIAllreduce MPIAllgather MPIReduceScatter "
            "MPIBroadcast MPIScatter MPIGather MPIReduce").split()
    missing = [op for op in spec if op not in LOWERINGS]
    assert not missing


def test_more_onnx_ops() -> None:
    check(one_op("ArgMax", [(F32, (3, 5))], axis=1, keepdims=0))
    check(one_op("ArgMax", [(F32, (3, 5))], select_last_index=1),
          [np.array([[1, 2, 2, 0, 1]] * 3, np.float32)])
    check(one_op("IsNaN", [X]), [np.array([[np.nan, 1, 2, 3]] * 3, np.float32)])
    for red in ("none", "add"):
        fn = one_op("ScatterND", [(F32, (4, 3)), np.array([[1], [3]], np.int64),
                                  (F32, (2, 3))], reduction=red)
        check(fn)


@pytest.mark.parametrize("dtype", [F32, DType.Float16])
def test_scatter_add_of_rows(dtype: DType) -> None:
    """An adding ``ScatterND`` of whole rows (the embedding gradient: index depth 1) runs
    as PyTorch's embedding backward, and one of a few rows (``few_scatter_rows``: a
    ``Gather``'s gradient) by ``index_add``: long runs of one index (every row into row
    0), negative indices, rows of a 3-D table, a table that is not zero, one wide row."""
    from distir.analysis.cost.compute import FEW_SCATTER_ROWS

    tol = 1e-5 if dtype is F32 else 5e-2
    rng = np.random.default_rng(0)
    many = FEW_SCATTER_ROWS + 36
    for idx, table in ((np.zeros((many, 1), np.int64), (2, 8)),
                       (rng.integers(-5, 5, (10, many // 10 + 1, 1)).astype(np.int64),
                        (5, 3, 4)),
                       (np.zeros((64, 1), np.int64), (2, 8)),
                       (rng.integers(-5, 5, (6, 7, 1)).astype(np.int64), (5, 3, 4)),
                       (np.array([[1], [3], [1]], np.int64), (4, 3)),
                       (np.array([[-2]], np.int64), (3, 5, 7, 16))):
        upd = (*idx.shape[:-1], *table[1:])
        fn = one_op("ScatterND", [(dtype, table), idx, (dtype, upd)], reduction="add")
        check(fn, rtol=tol, atol=tol)


def test_unsupported_op_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    load_lowerings()
    monkeypatch.delitem(LOWERINGS.rules, "Relu")
    fn = one_op("Relu", [X])
    with pytest.raises(UnsupportedError, match=r"op 'Relu' has no PyTorch lowering") as e:
        run_local(fn, random_for(fn))
    assert "\n" not in str(e.value)


def test_comm_op_needs_groups() -> None:
    text = """
func @main(%x: Tensor[Float32, (4,), 0]) {
  %y = Send(%x, device=1)
  return %y
}"""
    proj = project(distir.parse(text).entry)
    with pytest.raises(UnsupportedError, match="process groups"):
        compile_program(proj.programs[0], torch.device("cpu"))


def test_static_peak_counts_live_bytes() -> None:
    fn = distir.load("examples/mlp_step.dir").entry
    prog = compile_program(project(fn).programs[0], torch.device("cpu"))
    params = sum(p.type.size_bytes for p in fn.params)
    assert params < prog.static_peak_bytes < 4 * params + 4 * 8 * 48 * 4 * 6
    capped = compile_program(project(fn).programs[0], torch.device("cpu"),
                             memory_limit=params + 100)
    assert capped.limit_op is not None
    with pytest.raises(MemoryError, match="memory limit"):
        capped.run([to_torch(a, "cpu") for a in random_for(fn)])


def test_collectives_overwrite_only_dead_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    """An all-reduce works in place on an input whose last use it is (a gradient), and on a
    copy otherwise (a parameter, or a value used later)."""
    from distir.backend.lowering import Lowering

    load_lowerings()
    seen: list[bool] = []
    entry = LOWERINGS.rules["MPIAllreduce"]
    monkeypatch.setitem(LOWERINGS.rules, "MPIAllreduce", Lowering(
        lambda s: seen.append(s.donate[0]) or (lambda x: (x,)), entry.view, entry.comm))
    text = """
func @main(%p: Tensor[Float32, (4,), 0], %q: Tensor[Float32, (4,), 1]) {
  %g = Relu(%p)
  %h = Relu(%p)
  %v = Reshape(%h, dense<Int64>[2, 2])
  %a, %b = MPIAllreduce(%p, %q)
  %c, %d = MPIAllreduce(%g, %q)
  %e, %f = MPIAllreduce(%h, %q)
  %u = Add(%v, %v)
  return %a, %c, %e, %u
}"""
    text = text.replace("%v = Reshape(%h, dense<Int64>[2, 2])",
                        "%s = Constant(value=dense<Int64>[2, 2])\n  %v = Reshape(%h, %s)")
    proj = project(distir.parse(text).entry)
    compile_program(proj.programs[0], torch.device("cpu"), groups=object())  # type: ignore
    # %p is a parameter; %g dies at its all-reduce; %h lives on through its view %v.
    assert seen == [False, True, False]


class _NoGroups:
    """Stands for a GroupCache when a program is only compiled, never run."""

    def get(self, ranks: tuple[int, ...]) -> None:
        return None


def test_first_reader_of_an_allreduce_waits_for_it() -> None:
    """The allreduce is started asynchronously; the rank waits right before the first op
    that reads its result, not before the compute between."""
    text = """
func @main(%x: Tensor[Float32, (4,), 0], %y: Tensor[Float32, (4,), 1]) {
  %s0, %s1 = MPIAllreduce(%x, %y)
  %a = Relu(%x)
  %b = Add(%a, %s0)
  %c = Add(%b, %s0)
  %t0, %t1 = MPIAllreduce(%c, %y)
  return %c, %t0
}"""
    prog = project(distir.parse(text).entry).programs[0]
    c = compile_program(prog, "cpu", groups=_NoGroups())  # type: ignore[arg-type]
    steps = [(st.op_type, st.asynchronous, st.waits) for st in c.steps]
    s0 = c.steps[0].outs[0]
    assert steps == [("MPIAllreduce", True, ()), ("Relu", False, ()), ("Add", False, (s0,)),
                     ("Add", False, ()), ("MPIAllreduce", True, ())]


def test_known_operands_keep_the_programs_meaning() -> None:
    """Compiled in, a 0-d ``Gather`` index still gives a copy (the program may overwrite
    the result in place, which must not reach the data), an integer ``Pow`` stays exact,
    and an Adam step count below 1 is the reference's one-line error."""
    from distir.backend.lowering import known_inputs
    from distir.errors import ExecutionError

    fn = one_op("Gather", [X, (I64, ())], axis=0)
    x, i = random_for(fn)[0], np.array(1, np.int64)
    prog = compile_program(project(fn).programs[0], torch.device("cpu"),
                           known=known_inputs([None, i]))
    xt = to_torch(x, "cpu")
    with torch.inference_mode():
        (row,) = prog.run([xt, to_torch(i, "cpu")])
    assert row.data_ptr() != xt[1].data_ptr()
    np.testing.assert_array_equal(row.numpy(), x[1])
    fn = one_op("Pow", [(I64, (1,)), (I64, ())])
    base, three = np.array([257], np.int64), np.array(3, np.int64)
    prog = compile_program(project(fn).programs[0], torch.device("cpu"),
                           known=known_inputs([None, three]))
    with torch.inference_mode():
        (got,) = prog.run([to_torch(base, "cpu"), to_torch(three, "cpu")])
    assert got.tolist() == [257 ** 3]
    b = FunctionBuilder("adam")
    ps = [b.param(n, TensorType(F32, (4,), 0)) for n in ("w", "dw", "m", "v")]
    step = b.param("step", TensorType(F32, (), 0))
    outs = b.op("AdamOptimizer", *ps, step, lr=0.1, beta1=0.9, beta2=0.999, eps=1e-8,
                weight_decay=0.0, num_results=3)
    adam = b.ret(*outs)
    with pytest.raises(ExecutionError, match="step counts from 1"):
        compile_program(project(adam).programs[0], torch.device("cpu"),
                        known=known_inputs([None] * 4 + [np.array(0.0, np.float32)]))
