"""``grad`` of imported torch models against ``torch.autograd``, in float32.

Each model is exported by the TorchScript exporter (``dynamo=False``), imported with
``distir.import_onnx`` and given the loss ``sum(y * r)`` for a fixed random ``r``; the
gradients with respect to the float data inputs and to every parameter whose name
survived export must equal torch's to 1e-4 relative. GPT-2 (``distir.models.gpt2``, whose
weights are graph inputs) is checked against ``distir.models.torch_gpt2`` with a
cross-entropy loss.
"""

from __future__ import annotations

import io
import math
import warnings

import numpy as np
import onnx
import torch

import distir
from distir.ir import FunctionBuilder
from distir.ir.core import Function
from distir.transforms import grad

nn = torch.nn
F = torch.nn.functional


class CNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.c2 = nn.Conv2d(4, 6, 3, stride=2, groups=2, dilation=1)
        self.c3 = nn.Conv2d(6, 6, 2, padding=(1, 0), dilation=2)
        self.fc = nn.Linear(6, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.bn(self.c1(x)))
        h = F.max_pool2d(h, 3, stride=2, padding=1)
        h = F.avg_pool2d(self.c2(h), 2, padding=1)
        h = F.adaptive_avg_pool2d(torch.sigmoid(self.c3(h)), 1).flatten(1)
        return self.fc(h)


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(11, 8)
        self.ln = nn.LayerNorm(8)
        self.q = nn.Linear(8, 8)
        self.fc = nn.Linear(8, 16)
        self.out = nn.Linear(16, 3)

    def forward(self, ids: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        h = self.ln(self.emb(ids) + x)
        att = torch.softmax(self.q(h) @ h.transpose(1, 2) / math.sqrt(8), dim=-1)
        h = h + att @ h
        h = F.gelu(self.fc(h), approximate="tanh")
        h = torch.tanh(h) * torch.exp(-h * h) + h.pow(2).mean(-1, keepdim=True).sqrt()
        a, b = h.split(8, dim=-1)
        h = torch.cat([b, a / 2.0], dim=-1)
        h = torch.where(h > 0, h, 0.1 * h)
        return F.log_softmax(self.out(h.reshape(-1, 16)), dim=-1)


def export(model: nn.Module, args: tuple, names: list[str]) -> Function:
    f = io.BytesIO()
    with warnings.catch_warnings():  # the TorchScript exporter is deprecated, on purpose
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(model, args, f, dynamo=False, input_names=names,
                          output_names=["y"], do_constant_folding=False)
    return distir.import_onnx(onnx.load_from_string(f.getvalue())).entry


def with_loss(fn: Function, r: np.ndarray) -> Function:
    """``sum(fn(...)[0] * r)`` as a function of ``fn``'s parameters (a call of ``fn``)."""
    b = FunctionBuilder("loss")
    ps = [b.param(p.name, p.type) for p in fn.params]
    y = b.call(fn, *ps)
    rv = b.op("Constant", value=r, device=0)
    out = b.ret(b.op("ReduceSum", b.op("Mul", y, rv), keepdims=0))
    out.initializers = dict(fn.initializers)
    return out


def compare(model: nn.Module, args: tuple, names: list[str]) -> None:
    model.eval()
    fn = export(model, args, names)
    params = dict(model.named_parameters())
    survived = [n for n in fn.initializers if n in params]
    assert survived, "no parameter name survived export"
    data = [n for n, a in zip(names, args) if a.is_floating_point()]
    with torch.no_grad():
        y = model(*args)
    r = np.random.default_rng(3).standard_normal(tuple(y.shape)).astype(np.float32)
    g = grad(with_loss(fn, r), data + survived)
    outs = distir.execute(g, [a.numpy() for a in args])

    targs = [a.clone().requires_grad_(a.is_floating_point()) for a in args]
    model.zero_grad()
    loss = (model(*targs) * torch.from_numpy(r)).sum()
    loss.backward()
    want = [t.grad for t, a in zip(targs, args) if a.is_floating_point()]
    want += [params[n].grad for n in survived]
    np.testing.assert_allclose(outs[0], loss.item(), rtol=1e-4)
    for name, got, w in zip(data + survived, outs[1:], want):
        wn = w.numpy()
        scale = float(np.abs(wn).max()) or 1.0
        np.testing.assert_allclose(got, wn, rtol=1e-4, atol=1e-4 * scale, err_msg=name)


def _randomize_batch_norm(model: nn.Module) -> None:
    """Trained-looking statistics: the exporter would merge initializers equal by value
    (fresh running_var == weight == 1), which no trained model has."""
    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.weight.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.bias.copy_(torch.randn(m.num_features, generator=g))
                m.running_mean.copy_(torch.randn(m.num_features, generator=g))
                m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)


def test_cnn_gradients_match_torch() -> None:
    torch.manual_seed(0)
    model = CNN()
    _randomize_batch_norm(model)
    compare(model, (torch.randn(2, 3, 22, 19),), ["x"])


def test_attention_gradients_match_torch() -> None:
    torch.manual_seed(0)
    ids = torch.tensor([[1, 4, 4, 10], [0, 2, 9, 4]])
    compare(Attention(), (ids, torch.randn(2, 4, 8)), ["ids", "x"])


def test_gpt2_cross_entropy_gradients_match_torch() -> None:
    from distir.models.gpt2 import LAYER_WEIGHTS, GPT2Config
    from distir.models.torch_gpt2 import GPT2, load_weights
    from distir.transforms.training import training_step

    cfg = GPT2Config(n_layer=2, d_model=16, n_head=2, vocab_size=13, seq_len=5, batch_size=2)
    fn = cfg.build()
    ins = cfg.example_inputs(seed=0)
    names = list(cfg.weight_shapes())
    assert len(names) == 4 + cfg.n_layer * len(LAYER_WEIGHTS)
    step = training_step(fn, loss="cross_entropy", optimizer="sgd", lr=1.0, wrt=names)
    labels = np.random.default_rng(5).integers(0, cfg.vocab_size, (2, 5))
    out = distir.execute(step, [*ins, labels])

    model = GPT2(cfg, seed=0)
    load_weights(model, ins[1:])
    model.train(False)
    logits = model(torch.from_numpy(ins[0]))
    loss = F.cross_entropy(logits.reshape(-1, cfg.vocab_size),
                           torch.from_numpy(labels).reshape(-1), reduction="sum")
    loss.backward()
    np.testing.assert_allclose(out[0], loss.item(), rtol=1e-4)
    tparams = dict(model.named_parameters())
    weights = dict(zip([p.name for p in fn.params], ins))
    for name, new in zip(names, out[1:]):
        dw = weights[name] - new  # lr = 1: the SGD step is the gradient
        t = tparams[f"{name}.weight" if name in ("wte", "wpe") else name].grad.numpy()
        if ".c_" in name and name.endswith(".weight"):  # nn.Linear stores it transposed
            t = t.T
        scale = float(np.abs(t).max()) or 1.0
        np.testing.assert_allclose(dw, t, rtol=1e-4, atol=2e-4 * scale, err_msg=name)


def test_imported_cnn_training_step_runs_on_gloo() -> None:
    """A training step of an imported model (Conv, BatchNorm, pools: the gradient ops
    ConvGrad, MaxPoolGrad, AveragePoolGrad) types, simulates and runs on gloo, computing
    what the reference executor computes."""
    from distir.analysis import bind_inputs
    from distir.transforms import training_step

    torch.manual_seed(0)
    model = CNN()
    _randomize_batch_norm(model)
    model.eval()
    xv = torch.randn(2, 3, 22, 19)
    fn = export(model, (xv,), ["x"])
    step = training_step(fn, loss="cross_entropy", optimizer="adam", lr=1e-3)
    n = len(fn.initializers)  # every weight is a float initializer: all are trained
    assert len(distir.infer_types(step)) == 1 + n + 2 * n + 1  # loss, weights, m, v, step
    assert distir.simulate(step, hardware="h100-sxm").latency_s > 0
    labels = np.array([1, 4])
    args = bind_inputs(step, [xv.numpy(), labels])
    want = distir.execute(step, args)
    res = distir.run(step, args, backend="gloo", steps=1, warmup=0, timeout_s=120)
    assert res is not None and res.outputs is not None
    for g, w in zip(res.outputs, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6)
