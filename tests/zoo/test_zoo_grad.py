"""``grad`` of every zoo model (both exporters) equals ``torch.autograd`` in float32.

The loss is ``sum(y * r)`` for a fixed random ``r``. Compared: the gradient with respect to
the float data input (image models) and to every parameter whose name survived export
with its value. Two kinds of survivors are left out, because the exported graph no longer
holds that parameter alone: a parameter whose value another parameter of the same shape
shares (fresh LayerNorm weights, zero biases: the exporters keep one initializer for all
of them, whose gradient is the sum), and one whose value changed (a convolution with the
following BatchNorm folded into it). Tolerance: 1e-4 relative, plus 1e-4 of the largest
gradient element (a parameter whose true gradient is zero, such as attention's key bias,
is float32 noise on both sides).

Uses the zoo's cached exports (``tests/zoo/export.py``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers  # noqa: F401 - the test needs it

import distir
from distir.ir import FunctionBuilder
from distir.ir.core import Function
from distir.transforms import grad
from tests.zoo.models import BATCH, EXPORTERS, SEQ, SPECS

PAIRS = [(s.name, e) for s in SPECS for e in EXPORTERS]


def _with_loss(fn: Function, r: np.ndarray) -> Function:
    b = FunctionBuilder("loss")
    ps = [b.param(p.name, p.type) for p in fn.params]
    y = b.call(fn, *ps)
    y = y[0] if isinstance(y, tuple) else y
    out = b.ret(b.op("ReduceSum", b.op("Mul", y, b.op("Constant", value=r, device=0)),
                     keepdims=0))
    out.initializers = dict(fn.initializers)
    return out


@pytest.mark.parametrize(("model", "exporter"), PAIRS, ids=[f"{m}-{e}" for m, e in PAIRS])
def test_zoo_gradients_match_torch(model: str, exporter: str) -> None:
    from tests.zoo.export import ExportFailed, exported
    from tests.zoo.models import BY_NAME

    spec = BY_NAME[model]
    try:
        path = exported(spec, exporter).path
    except ExportFailed as e:  # the zoo's own tests report export failures
        pytest.skip(f"export failed: {e}")
    fn = distir.import_onnx(path, dims=spec.dims()).entry
    net = spec.build()
    args = spec.inputs(BATCH, SEQ)
    params = dict(net.named_parameters())
    values = {n: p.detach().numpy() for n, p in params.items()}

    def alone(n: str) -> bool:
        v = values[n]
        return not any(q != n and w.shape == v.shape and np.array_equal(w, v)
                       for q, w in values.items())

    survived = [n for n in fn.initializers if n in params and alone(n)
                and np.array_equal(np.asarray(fn.initializers[n]), values[n])]
    data = [n for n, a in zip(spec.input_names, args) if a.is_floating_point()]
    assert data or survived
    with torch.no_grad():
        y = net(*args)
    r = np.random.default_rng(3).standard_normal(tuple(y.shape)).astype(np.float32)
    outs = distir.execute(grad(_with_loss(fn, r), data + survived), [a.numpy() for a in args])

    targs = [a.clone().requires_grad_(a.is_floating_point()) for a in args]
    loss = (net(*targs) * torch.from_numpy(r)).sum()
    loss.backward()
    want = [t.grad for t, a in zip(targs, args) if a.is_floating_point()]
    want += [params[n].grad for n in survived]
    np.testing.assert_allclose(outs[0], loss.item(), rtol=1e-4)
    for name, got, w in zip(data + survived, outs[1:], want):
        wn = np.zeros_like(got) if w is None else w.numpy()
        scale = float(np.abs(wn).max()) or 1.0
        np.testing.assert_allclose(got, wn, rtol=1e-4, atol=1e-4 * scale, err_msg=name)
