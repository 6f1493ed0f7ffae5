"""Communication and training ops: their reference semantics (against numpy and
torch.autograd / torch.optim), their type rules and their error messages."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import distir
from distir.analysis import execute, infer_types
from distir.analysis.rules import NUMPY_RULES, TYPE_RULES, full_attrs, load_rules
from distir.analysis.values import make_concrete
from distir.errors import ExecutionError, TypeInferenceError
from distir.ir.types import DType, TensorType

load_rules()
rng = np.random.default_rng(7)


def f32(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def run_op(op: str, inputs: list[Any], attrs: dict[str, Any] | None = None,
           n_out: int = 1) -> tuple:
    return NUMPY_RULES.get(op)(op, tuple(inputs), full_attrs(op, attrs or {}), n_out)


def type_op(op: str, args: list[Any], attrs: dict[str, Any] | None = None,
            n_out: int = 1) -> tuple:
    return TYPE_RULES.get(op)(op, tuple(args), full_attrs(op, attrs or {}), n_out)


def T(shape: tuple[int, ...], device: int = 0, dtype: DType = DType.Float32) -> TensorType:
    return TensorType(dtype, shape, device)


# ---------------------------------------------------------------- communication semantics

COMM_PROGRAM = """
func @main(%a: Tensor[Float32, (4, 6), 0], %b: Tensor[Float32, (4, 6), 1],
           %c: Tensor[Float32, (4, 6), 2]) {
  %s0, %s1, %s2 = MPIAllreduce(%a, %b, %c)
  %g0, %g1 = MPIAllgather(%a, %b, axis=1)
  %r0, %r1 = MPIReduceScatter(%a, %b, axis=0)
  %b0, %b2, %b3 = MPIBroadcast(%a, devices=[0, 2, 3])
  %x1, %x2, %x3 = MPIScatter(%c, axis=1, devices=[1, 2, 3])
  %gat = MPIGather(%a, %b, %c, axis=0, device=3)
  %red = MPIReduce(%a, %c, device=1)
  %sent = Send(%c, device=0)
  return %s0, %s1, %s2, %g0, %g1, %r0, %r1, %b0, %b2, %b3, %x1, %x2, %x3, %gat, %red, %sent
}
"""


def test_comm_semantics_and_placement() -> None:
    m = distir.parse(COMM_PROGRAM, filename="comm.dir")
    a, b, c = f32(4, 6), f32(4, 6), f32(4, 6)
    outs = execute(m, [a, b, c])
    s = a + b + c
    want = [s, s, s,
            np.concatenate([a, b], 1), np.concatenate([a, b], 1),
            (a + b)[:2], (a + b)[2:],
            a, a, a,
            c[:, :2], c[:, 2:4], c[:, 4:],
            np.concatenate([a, b, c], 0), a + c, c]
    assert len(outs) == len(want)
    for o, w in zip(outs, want):
        np.testing.assert_allclose(o, w, rtol=1e-6)
    types = infer_types(m)
    assert [t.device for t in types] == [0, 1, 2, 0, 1, 0, 1, 0, 2, 3, 1, 2, 3, 3, 1, 0]
    assert [t.shape for t in types] == [(4, 6)] * 3 + [(4, 12)] * 2 + [(2, 6)] * 2 + \
        [(4, 6)] * 3 + [(4, 2)] * 3 + [(12, 6), (4, 6), (4, 6)]


def test_collective_of_one_participant() -> None:
    x = f32(3, 2)
    (y,) = run_op("MPIAllreduce", [x])
    np.testing.assert_array_equal(y, x)
    assert type_op("MPIAllreduce", [T((3, 2), 5)]) == (T((3, 2), 5),)


def test_allreduce_keeps_dtype_and_adds_in_order() -> None:
    xs = [f32(5).astype(np.float16) for _ in range(3)]
    out = run_op("MPIAllreduce", xs, n_out=3)
    assert all(o.dtype == np.float16 for o in out)
    np.testing.assert_array_equal(out[0], (xs[0] + xs[1]) + xs[2])
    assert all(o is not xs[0] for o in out)  # inputs are not mutated


def test_send_of_a_scalar_and_concrete_values_propagate() -> None:
    from distir.ir.types import ScalarType

    assert type_op("Send", [ScalarType(DType.Int64, 0)], {"device": 2}) == \
        (ScalarType(DType.Int64, 2),)
    m = distir.parse("""
func @main(%x: Tensor[Float32, (2, 2), 0]) {
  %k = Constant(value=dense<Int64>[4, 1], device=0)
  %k1 = Send(%k, device=1)
  %x1 = Send(%x, device=1)
  %r = Reshape(%x1, %k1)
  return %r
}
""")
    (t,) = infer_types(m)
    assert t == T((4, 1), 1)


# ------------------------------------------------------------------ communication errors

def _check_error(text: str, pattern: str, exc: type = TypeInferenceError) -> None:
    m = distir.parse(text, filename="bad.dir")
    with pytest.raises(exc, match=pattern):
        infer_types(m)


def test_scatter_must_divide_evenly() -> None:
    _check_error("""
func @main(%x: Tensor[Float32, (7, 4), 0]) {
  %a, %b = MPIScatter(%x, axis=0, devices=[0, 1])
  return %a
}""", r"^bad\.dir:3:12: error: MPIScatter: cannot split axis 0 of size 7 "
      r"\(shape \(7, 4\)\) into 2 equal shards: use a size divisible by 2$")


def test_reduce_scatter_must_divide_evenly() -> None:
    _check_error("""
func @main(%x: Tensor[Float32, (4, 5), 0], %y: Tensor[Float32, (4, 5), 1]) {
  %a, %b = MPIReduceScatter(%x, %y, axis=1)
  return %a
}""", r"^bad\.dir:3:12: error: .*cannot split axis 1 of size 5 .* into 2 equal shards")


def test_allreduce_shapes_must_agree() -> None:
    _check_error("""
func @main(%x: Tensor[Float32, (4, 5), 0], %y: Tensor[Float32, (4, 6), 1]) {
  %a, %b = MPIAllreduce(%x, %y)
  return %a
}""", r"^bad\.dir:3:12: error: MPIAllreduce: .*input 0 \(on device 0\) is \(4, 5\) and input "
      r"1 \(on device 1\) is \(4, 6\)")


def test_allgather_shapes_must_agree_off_axis() -> None:
    _check_error("""
func @main(%x: Tensor[Float32, (4, 5), 0], %y: Tensor[Float32, (3, 6), 1]) {
  %a, %b = MPIAllgather(%x, %y, axis=0)
  return %a
}""", r"^bad\.dir:3:12: error: MPIAllgather: .*along axis 0 .*input 1 \(on device 1\) is "
      r"\(3, 6\)")


def test_collective_dtypes_must_agree() -> None:
    _check_error("""
func @main(%x: Tensor[Float32, (4,), 0], %y: Tensor[Float16, (4,), 1]) {
  %r = MPIReduce(%x, %y, device=0)
  return %r
}""", r"^bad\.dir:3:8: error: MPIReduce: .*Float32 and Float16")


def test_numpy_rules_check_even_split_without_types() -> None:
    m = distir.parse("""
func @main(%x: Tensor[Float32, (5, 4), 0]) {
  %a, %b = MPIScatter(%x, axis=0, devices=[0, 1])
  return %a
}""", filename="s.dir")
    with pytest.raises(ExecutionError, match=r"^s\.dir:3:12: error: MPIScatter: "
                       r"cannot split axis 0 of size 5"):
        execute(m, [f32(5, 4)], check_types=False)


# --------------------------------------------------------------------- training vs torch

import torch  # noqa: E402 - the torch comparisons below


def _grads(fn: Any, inputs: list[np.ndarray], dy: np.ndarray | None = None) -> list:
    ts = [torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in inputs]
    y = fn(*ts)
    y.backward(torch.ones_like(y) if dy is None else torch.tensor(dy, dtype=torch.float64))
    return [t.grad.numpy() for t in ts]


@pytest.mark.parametrize("sa,sb", [((3, 4), (4, 5)), ((2, 3, 4), (2, 4, 5)),
                                   ((2, 3, 4), (4, 5)), ((2, 1, 3, 4), (5, 4, 6)),
                                   ((4,), (2, 4, 3)), ((2, 3, 4), (4,)), ((4,), (4,))])
def test_matmul_grad_matches_autograd(sa: tuple, sb: tuple) -> None:
    a, b = f32(*sa), f32(*sb)
    dy = f32(*np.matmul(a, b).shape)
    da, db = run_op("MatMulGrad", [a, b, dy], n_out=2)
    wa, wb = _grads(torch.matmul, [a, b], dy)
    assert da.shape == a.shape and db.shape == b.shape and da.dtype == np.float32
    np.testing.assert_allclose(da, wa, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(db, wb, rtol=1e-5, atol=1e-5)
    assert type_op("MatMulGrad", [T(sa), T(sb), T(dy.shape)], n_out=2) == (T(sa), T(sb))


@pytest.mark.parametrize("ta,tb,alpha,beta,c_shape", [
    (0, 0, 1.0, 1.0, (5,)), (1, 0, 0.5, 2.0, (3, 5)), (0, 1, 2.0, -1.0, (3, 1)),
    (1, 1, 1.5, 0.5, ()), (0, 0, 1.0, 1.0, None)])
def test_gemm_grad_matches_autograd(ta: int, tb: int, alpha: float, beta: float,
                                    c_shape: tuple | None) -> None:
    a = f32(4, 3) if ta else f32(3, 4)
    b = f32(5, 4) if tb else f32(4, 5)
    dy = f32(3, 5)
    attrs = {"transA": ta, "transB": tb, "alpha": alpha, "beta": beta}
    if c_shape is None:
        da, db = run_op("GemmGrad", [a, b, dy], attrs, n_out=2)
        wa, wb = _grads(lambda x, y: alpha * ((x.T if ta else x) @ (y.T if tb else y)),
                        [a, b], dy)
    else:
        c = f32(*c_shape)
        da, db, dc = run_op("GemmGrad", [a, b, c, dy], attrs, n_out=3)
        wa, wb, wc = _grads(lambda x, y, z: alpha * ((x.T if ta else x) @ (y.T if tb else y))
                            + beta * z, [a, b, c], dy)
        assert dc.shape == c.shape
        np.testing.assert_allclose(dc, wc, rtol=1e-5, atol=1e-5)
        assert type_op("GemmGrad", [T(a.shape), T(b.shape), T(c.shape), T((3, 5))], attrs,
                       n_out=3) == (T(a.shape), T(b.shape), T(c.shape))
    np.testing.assert_allclose(da, wa, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(db, wb, rtol=1e-5, atol=1e-5)


def test_relu_and_gelu_grads_match_autograd() -> None:
    x = f32(4, 5)
    x[0, 0] = 0.0  # torch's ReLU gradient at 0 is 0
    dy = f32(4, 5)
    (dx,) = run_op("ReluGrad", [x, dy])
    (want,) = _grads(torch.relu, [x], dy)
    np.testing.assert_array_equal(dx, want.astype(np.float32))
    for approx in ("none", "tanh"):
        (dx,) = run_op("GeluGrad", [x, dy], {"approximate": approx})
        (want,) = _grads(lambda t, a=approx: torch.nn.functional.gelu(t, approximate=a), [x], dy)
        assert dx.dtype == np.float32
        np.testing.assert_allclose(dx, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_mse_loss_and_grad(reduction: str) -> None:
    p, y = f32(6, 3), f32(6, 3)

    def loss(pt: Any) -> Any:
        d = 0.5 * (pt - torch.tensor(y, dtype=torch.float64)) ** 2
        return d.sum() if reduction == "sum" else d.mean()

    (lv,) = run_op("MSELoss", [p, y], {"reduction": reduction})
    (g,) = run_op("MSELossGrad", [p, y], {"reduction": reduction})
    pt = torch.tensor(p, dtype=torch.float64, requires_grad=True)
    l_t = loss(pt)
    l_t.backward()
    assert lv.shape == () and lv.dtype == np.float32
    np.testing.assert_allclose(lv, l_t.item(), rtol=1e-6)
    np.testing.assert_allclose(g, pt.grad.numpy(), rtol=1e-6, atol=1e-7)
    if reduction == "sum":
        np.testing.assert_array_equal(g, p - y)


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_softmax_cross_entropy_matches_torch(reduction: str) -> None:
    logits = f32(2, 3, 5) * 3
    labels = rng.integers(0, 5, (2, 3)).astype(np.int64)
    (lv,) = run_op("SoftmaxCrossEntropyLoss", [logits, labels], {"reduction": reduction})
    (g,) = run_op("SoftmaxCrossEntropyLossGrad", [logits, labels], {"reduction": reduction})
    lt = torch.tensor(logits, dtype=torch.float64, requires_grad=True)
    want = torch.nn.functional.cross_entropy(lt.reshape(-1, 5),
                                             torch.tensor(labels.reshape(-1)),
                                             reduction=reduction)
    want.backward()
    np.testing.assert_allclose(lv, want.item(), rtol=1e-5)
    np.testing.assert_allclose(g, lt.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert g.dtype == np.float32 and lv.shape == ()
    t_logits, t_labels = T((2, 3, 5)), T((2, 3), dtype=DType.Int64)
    assert type_op("SoftmaxCrossEntropyLoss", [t_logits, t_labels]) == (T(()),)
    assert type_op("SoftmaxCrossEntropyLossGrad", [t_logits, t_labels]) == (t_logits,)


def test_softmax_cross_entropy_rejects_bad_labels() -> None:
    with pytest.raises(ExecutionError, match=r"label 5 is not a class index in \[0, 5\)"):
        run_op("SoftmaxCrossEntropyLoss", [f32(2, 5), np.array([1, 5])])
    with pytest.raises(TypeInferenceError, match=r"labels must have the shape \(2,\)"):
        type_op("SoftmaxCrossEntropyLoss", [T((2, 5)), T((2, 1), dtype=DType.Int64)])
    with pytest.raises(TypeInferenceError, match=r"labels must be Int64"):
        type_op("SoftmaxCrossEntropyLoss", [T((2, 5)), T((2,))])


def _grad_sequence(shape: tuple[int, ...], steps: int = 3) -> list[np.ndarray]:
    return [f32(*shape) for _ in range(steps)]


def test_sgd_matches_torch_over_three_steps() -> None:
    w0 = f32(4, 3)
    grads = _grad_sequence(w0.shape)
    p = torch.nn.Parameter(torch.tensor(w0))
    opt = torch.optim.SGD([p], lr=0.1)
    w = w0
    for g in grads:
        p.grad = torch.tensor(g)
        opt.step()
        (w,) = run_op("SGDOptimizer", [w, g], {"lr": 0.1})
    assert w.dtype == np.float32
    np.testing.assert_allclose(w, p.detach().numpy(), rtol=0, atol=1e-6)


@pytest.mark.parametrize("attrs", [
    {"lr": 1e-3},
    {"lr": 0.05, "beta1": 0.8, "beta2": 0.99, "eps": 1e-6, "weight_decay": 0.1},
    {"lr": 0.1, "eps": 0.5},  # a large eps shows where it is added
])
def test_adam_matches_torch_over_three_steps(attrs: dict[str, float]) -> None:
    w0 = f32(5, 4)
    grads = _grad_sequence(w0.shape)
    p = torch.nn.Parameter(torch.tensor(w0))
    full = full_attrs("AdamOptimizer", attrs)
    opt = torch.optim.Adam([p], lr=full["lr"], betas=(full["beta1"], full["beta2"]),
                           eps=full["eps"], weight_decay=full["weight_decay"])
    w, m, v = w0, np.zeros_like(w0), np.zeros_like(w0)
    for step, g in enumerate(grads, 1):
        p.grad = torch.tensor(g)
        opt.step()
        w, m, v = run_op("AdamOptimizer", [w, g, m, v, np.array(step, np.int64)], attrs,
                         n_out=3)
    state = opt.state[p]
    for ours, theirs in ((w, p.detach()), (m, state["exp_avg"]), (v, state["exp_avg_sq"])):
        assert ours.dtype == np.float32
        np.testing.assert_allclose(ours, theirs.numpy(), rtol=0, atol=1e-6)
    assert np.abs(w - w0).max() > 1e-4  # the weights did move


def test_adam_in_a_program_and_its_types() -> None:
    m = distir.parse("""
func @main(%w: Tensor[Float32, (3, 2), 0], %g: Tensor[Float32, (3, 2), 0],
           %m: Tensor[Float32, (3, 2), 0], %v: Tensor[Float32, (3, 2), 0]) {
  %step = Constant(value=dense<Int64, ()>[1])
  %w1, %m1, %v1 = AdamOptimizer(%w, %g, %m, %v, %step, lr=0.01)
  return %w1, %m1, %v1
}""")
    assert infer_types(m) == (T((3, 2)),) * 3
    w, g = f32(3, 2), f32(3, 2)
    w1, m1, v1 = execute(m, [w, g, np.zeros_like(w), np.zeros_like(w)])
    # The first Adam step moves every weight by lr against the gradient's sign.
    np.testing.assert_allclose(w1, w - 0.01 * np.sign(g), atol=1e-6)
    np.testing.assert_allclose(m1, 0.1 * g, rtol=1e-6)


def test_adam_step_counts_from_one() -> None:
    step0 = make_concrete(np.array(0, np.int64), 0)
    with pytest.raises(TypeInferenceError, match="step counts from 1"):
        type_op("AdamOptimizer", [T((2,))] * 4 + [step0], {"lr": 0.1}, n_out=3)
    with pytest.raises(ExecutionError, match="step counts from 1"):
        run_op("AdamOptimizer", [f32(2)] * 4 + [np.array(0)], {"lr": 0.1}, n_out=3)


def test_training_type_errors() -> None:
    with pytest.raises(TypeInferenceError, match=r"dy must have the shape \(3, 5\) of "
                       r"MatMul\(a, b\)"):
        type_op("MatMulGrad", [T((3, 4)), T((4, 5)), T((3, 4))], n_out=2)
    with pytest.raises(TypeInferenceError, match=r"the gradient dw must have the shape "
                       r"\(4, 3\)"):
        type_op("SGDOptimizer", [T((4, 3)), T((3, 4))], {"lr": 0.1})
    with pytest.raises(TypeInferenceError, match=r"reduction must be \"sum\" or \"mean\""):
        type_op("MSELoss", [T((2,)), T((2,))], {"reduction": "none"})
    with pytest.raises(TypeInferenceError, match="dc"):
        type_op("GemmGrad", [T((3, 4)), T((4, 5)), T((3, 5))], n_out=3)
    assert type_op("MSELoss", [T((2, 3)), T((2, 3))]) == (T(()),)
    assert type_op("GeluGrad", [T((2, 3), 1), T((2, 3), 1)]) == (T((2, 3), 1),)
