"""``training_step``: the MLP's forward made into the hand-written MLP step, losses and
optimizers against torch, and the step typed, simulated and run on gloo."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import distir
from distir.errors import ConfigError, TransformError
from distir.ir import FunctionBuilder
from distir.ir.core import Function
from distir.models.mlp import MLPConfig
from distir.transforms import grad, training_step

CFG = MLPConfig(batch_size=4, input_dim=8, hidden_dim=16, output_dim=5, num_layers=3, lr=0.05)
WRT = [f"w{i}" for i in range(CFG.num_layers)]


def mlp_forward(cfg: MLPConfig = CFG) -> Function:
    """The forward pass of ``cfg``'s MLP step: parameters ``w0 .. w{L-1}, x``."""
    b = FunctionBuilder("main")
    ws = [b.param(f"w{i}", cfg.weight_type(i)) for i in range(cfg.num_layers)]
    a = b.param("x", cfg.input_types()[0])
    for w in ws:
        a = b.op("Relu", b.op("MatMul", a, w))
    return b.ret(a)


def inputs(seed: int = 0) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    ws = [rng.standard_normal(CFG.layer_dims(i)).astype(np.float32) * 0.5
          for i in range(CFG.num_layers)]
    xv = rng.standard_normal((CFG.batch_size, CFG.input_dim)).astype(np.float32)
    yv = rng.standard_normal((CFG.batch_size, CFG.output_dim)).astype(np.float32)
    return ws, xv, yv


def test_mlp_training_step_is_the_hand_written_step() -> None:
    step = training_step(mlp_forward(), loss="mse", optimizer="sgd", lr=CFG.lr, wrt=WRT)
    ws, xv, yv = inputs()
    got = distir.execute(step, [*ws, xv, yv])
    want = distir.execute(CFG.build(), [*ws, xv, yv])
    assert len(got) == 1 + len(want)
    for g, w in zip(got[1:], want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)
    # The same ops as the hand-written step, plus the loss itself.
    kinds = sorted(op.op_type for op in step.ops)
    assert kinds == sorted([op.op_type for op in CFG.build().ops] + ["MSELoss"])


def _torch_mlp(ws: list[np.ndarray], xv: Any) -> tuple:
    import torch
    tw = [torch.tensor(w, requires_grad=True) for w in ws]
    a = xv if isinstance(xv, torch.Tensor) else torch.tensor(xv)
    for w in tw:
        a = torch.relu(a @ w)
    return tw, a


def test_mlp_grad_matches_torch_autograd() -> None:
    import torch
    b = FunctionBuilder("main")
    ws_p = [b.param(f"w{i}", CFG.weight_type(i)) for i in range(CFG.num_layers)]
    x_t, y_t = CFG.input_types()
    a = b.param("x", x_t)
    yp = b.param("y", y_t)
    for w in ws_p:
        a = b.op("Relu", b.op("MatMul", a, w))
    g = grad(b.ret(b.op("MSELoss", a, yp)), WRT + ["x"])
    ws, xv, yv = inputs()
    out = distir.execute(g, [*ws, xv, yv])
    tx = torch.tensor(xv, requires_grad=True)
    tw, pred = _torch_mlp(ws, tx)
    loss = 0.5 * ((pred - torch.tensor(yv)) ** 2).sum()
    loss.backward()
    np.testing.assert_allclose(out[0], loss.item(), rtol=1e-5)
    for got, t in zip(out[1:], [*tw, tx]):
        np.testing.assert_allclose(got, t.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_cross_entropy_adam_step_matches_torch() -> None:
    import torch
    fwd = mlp_forward()
    fwd.initializers = {}
    step = training_step(fwd, loss="cross_entropy", optimizer="adam", lr=1e-2, wrt=WRT)
    ws, xv, _ = inputs(1)
    labels = np.array([0, 4, 2, 2])
    state = [np.zeros_like(w) for w in ws for _ in range(2)]
    out = distir.execute(step, [*ws, xv, labels, *state, np.ones((), np.float32)])
    tw, a = _torch_mlp(ws, xv)
    opt = torch.optim.Adam(tw, lr=1e-2)
    loss = torch.nn.functional.cross_entropy(a, torch.tensor(labels), reduction="sum")
    loss.backward()
    opt.step()
    np.testing.assert_allclose(out[0], loss.item(), rtol=1e-5)
    n = CFG.num_layers
    for got, t in zip(out[1:1 + n], tw):
        np.testing.assert_allclose(got, t.detach().numpy(), rtol=1e-5, atol=1e-6)
    for i, t in enumerate(tw):
        st = opt.state[t]
        np.testing.assert_allclose(out[1 + n + 2 * i], st["exp_avg"].numpy(), rtol=1e-4,
                                   atol=1e-7)
        np.testing.assert_allclose(out[2 + n + 2 * i], st["exp_avg_sq"].numpy(), rtol=1e-4,
                                   atol=1e-9)
    assert out[-1] == 2.0


def test_adam_state_is_bound_when_the_weights_are() -> None:
    fwd = mlp_forward()
    ws, xv, yv = inputs()
    fwd.initializers = {f"w{i}": w for i, w in enumerate(ws)}
    step = training_step(fwd, optimizer="adam", lr=1e-3)  # wrt: the bound weights
    assert [p.name for p in step.params if p.name not in step.initializers] == ["x", "target"]
    out = distir.execute(step, [xv, yv])
    assert len(out) == 1 + 3 + 6 + 1


def test_training_step_types_simulates_and_runs_on_gloo() -> None:
    import torch  # noqa: F401 - the test needs it
    step = training_step(mlp_forward(), loss="mse", optimizer="adam", lr=1e-3, wrt=WRT)
    types = distir.infer_types(step)
    assert types[0].shape == () and len(types) == 1 + 3 + 6 + 1
    sim = distir.simulate(step, hardware="h100-sxm")
    assert sim.latency_s > 0
    ws, xv, yv = inputs()
    args = [*ws, xv, yv, *[np.zeros_like(w) for w in ws for _ in range(2)],
            np.ones((), np.float32)]
    want = distir.execute(step, args)
    res = distir.run(step, args, backend="gloo", steps=1, warmup=0, timeout_s=120)
    assert res is not None and res.outputs is not None
    for g, w in zip(res.outputs, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cfg", [(2, 1, 1, 1), (2, 2, 1, 2)], ids=["D2", "D2T2K2"])
def test_training_step_distributes(cfg: tuple[int, int, int, int]) -> None:
    """The step has the structure the D/T/P transforms expect of a training step, and the
    distributed step computes the same loss and update."""
    step = training_step(mlp_forward(), loss="mse", optimizer="sgd", lr=CFG.lr, wrt=WRT)
    ws, xv, yv = inputs()
    want = distir.execute(step, [*ws, xv, yv])
    dist = distir.transforms.dtp(distir.transforms.analyze(step), *cfg, self_contained=True)
    got = distir.execute(dist, [*ws, xv, yv], check_types=False)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_grad_and_step_of_a_call() -> None:
    """Calls are inlined before differentiation."""
    inner = mlp_forward()
    inner.name = "layer"
    b = FunctionBuilder("main")
    ps = [b.param(p.name, p.type) for p in inner.params]
    fn = b.ret(b.call(inner, *ps))
    step = training_step(fn, wrt=WRT)
    ws, xv, yv = inputs()
    want = distir.execute(training_step(mlp_forward(), wrt=WRT), [*ws, xv, yv])
    for g, w in zip(distir.execute(step, [*ws, xv, yv]), want):
        np.testing.assert_allclose(g, w, rtol=1e-6)


@pytest.mark.parametrize("kw,pattern", [
    ({"loss": "hinge"}, r"loss must be one of mse, cross_entropy, got 'hinge'"),
    ({"optimizer": "rmsprop"}, r"optimizer must be one of sgd, adam"),
    ({"lr": -1.0}, r"lr must be a positive number"),
    ({"reduction": "max"}, r"reduction must be"),
    ({"checkpoint": "all"}, r"checkpoint must be"),
])
def test_bad_options_are_one_line(kw: dict, pattern: str) -> None:
    with pytest.raises(ConfigError, match=pattern) as e:
        training_step(mlp_forward(), wrt=WRT, **kw)
    assert "\n" not in str(e.value)


def test_nothing_to_train_is_one_line() -> None:
    with pytest.raises(TransformError, match=r"no floating-point parameter bound to an "
                       r"initializer.*wrt=\[names\]"):
        training_step(mlp_forward())


def test_checkpointed_step_computes_the_same_with_less_memory() -> None:
    from distir.models.gpt2 import GPT2Config

    cfg = GPT2Config(n_layer=4, d_model=64, n_head=2, vocab_size=17, seq_len=64, batch_size=4)
    fn = cfg.build()
    names = list(cfg.weight_shapes())
    plain = training_step(fn, loss="cross_entropy", optimizer="sgd", lr=0.1, wrt=names)
    ckpt = training_step(fn, loss="cross_entropy", optimizer="sgd", lr=0.1, wrt=names,
                         checkpoint="layers")
    ins = cfg.example_inputs(seed=0)
    labels = np.random.default_rng(0).integers(0, cfg.vocab_size, (cfg.batch_size,
                                                                   cfg.seq_len))
    for a, b in zip(distir.execute(plain, [*ins, labels]),
                    distir.execute(ckpt, [*ins, labels])):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    sp = distir.simulate(plain, hardware="h100-sxm")
    sc = distir.simulate(ckpt, hardware="h100-sxm")
    assert sc.peak_memory_bytes[0] < 0.8 * sp.peak_memory_bytes[0]
    assert sc.latency_s > sp.latency_s
    assert len(ckpt.ops) > len(plain.ops)


def test_checkpoint_without_layers_is_one_line() -> None:
    b = FunctionBuilder("main")
    w = b.param("w", CFG.weight_type(0))
    fn = b.ret(b.op("MatMul", b.param("x", CFG.input_types()[0]), w))
    with pytest.raises(TransformError, match=r"found no repeated layers") as e:
        training_step(fn, wrt=["w"], checkpoint="layers")
    assert "\n" not in str(e.value)
