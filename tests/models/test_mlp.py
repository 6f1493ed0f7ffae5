"""The MLP training step builder: structure, types, and a reference step checked by hand."""

from __future__ import annotations

import numpy as np
import pytest

import distir
from distir.errors import ConfigError, DistIRError
from distir.ir import DType, TensorType, dumps, parse, verify
from distir.models import MLPConfig, mlp


def numpy_step(ws: list[np.ndarray], x: np.ndarray, y: np.ndarray, lr: float,
               ) -> list[np.ndarray]:
    """One SGD step of a ReLU MLP on 0.5·sum((p - y)²), by hand (no DistIR involved)."""
    hs, acts = [], [x]
    for w in ws:
        hs.append(acts[-1] @ w)
        acts.append(np.maximum(hs[-1], 0))
    da = acts[-1] - y
    grads = [None] * len(ws)
    for i in reversed(range(len(ws))):
        dh = da * (hs[i] > 0)
        grads[i] = acts[i].T @ dh
        da = dh @ ws[i].T
    return [w - lr * g for w, g in zip(ws, grads, strict=True)]


def test_structure_and_names() -> None:
    fn = mlp(batch_size=4, input_dim=8, hidden_dim=16, output_dim=2, num_layers=3)
    verify(fn)
    assert [p.name for p in fn.params] == ["w0", "w1", "w2", "x", "y"]
    assert [r.name for r in fn.returns] == ["w0_new", "w1_new", "w2_new"]
    assert [p.type for p in fn.params] == [
        TensorType(DType.Float32, (8, 16), 0), TensorType(DType.Float32, (16, 16), 0),
        TensorType(DType.Float32, (16, 2), 0), TensorType(DType.Float32, (4, 8), 0),
        TensorType(DType.Float32, (4, 2), 0)]
    counts: dict[str, int] = {}
    for op in fn.ops:
        counts[op.op_type] = counts.get(op.op_type, 0) + 1
    assert counts == {"MatMul": 3, "Relu": 3, "MSELossGrad": 1, "ReluGrad": 3,
                      "MatMulGrad": 3, "SGDOptimizer": 3}
    names = {v.name for op in fn.ops for v in op.outputs}
    for i in range(3):
        assert {f"h{i}", f"a{i}", f"dh{i}", f"dw{i}", f"w{i}_new"} <= names
    # Text round trip: the printed step parses back to the same text.
    text = dumps(fn)
    assert dumps(parse(text)) == text


def test_types_and_placement() -> None:
    cfg = MLPConfig(batch_size=4, input_dim=8, hidden_dim=16, output_dim=2, num_layers=3,
                    dtype=DType.Float16, device=3)
    fn = cfg.build()
    out = distir.infer_types(fn)
    assert out == tuple(cfg.weight_type(i) for i in range(3))
    assert all(t.device == 3 and t.dtype is DType.Float16 for t in out)


@pytest.mark.parametrize("num_layers", [1, 2, 4])
def test_reference_step_matches_numpy(num_layers: int) -> None:
    cfg = MLPConfig(batch_size=6, input_dim=5, hidden_dim=7, output_dim=3,
                    num_layers=num_layers, dtype=DType.Float64, lr=0.05)
    rng = np.random.default_rng(num_layers)
    ws = [rng.standard_normal(cfg.layer_dims(i)) for i in range(num_layers)]
    x = rng.standard_normal((6, 5))
    y = rng.standard_normal((6, 3))
    got = distir.execute(cfg.build(), [*ws, x, y])
    want = numpy_step(ws, x, y, 0.05)
    assert len(got) == num_layers
    for g, w, w0 in zip(got, want, ws, strict=True):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
        assert not np.allclose(g, w0)  # every weight moved


def test_reference_step_matches_torch_autograd() -> None:
    import torch
    cfg = MLPConfig(batch_size=8, input_dim=6, hidden_dim=10, output_dim=4, num_layers=3,
                    lr=0.1)
    rng = np.random.default_rng(0)
    ws = [rng.standard_normal(cfg.layer_dims(i)).astype(np.float32) for i in range(3)]
    x = rng.standard_normal((8, 6)).astype(np.float32)
    y = rng.standard_normal((8, 4)).astype(np.float32)
    tw = [torch.tensor(w, requires_grad=True) for w in ws]
    a = torch.tensor(x)
    for w in tw:
        a = torch.relu(a @ w)
    loss = 0.5 * ((a - torch.tensor(y)) ** 2).sum()
    loss.backward()
    want = [(w - 0.1 * w.grad).detach().numpy() for w in tw]
    got = distir.execute(cfg.build(), [*ws, x, y])
    for g, w in zip(got, want, strict=True):
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_config_sizes() -> None:
    cfg = MLPConfig(batch_size=2, input_dim=3, hidden_dim=5, output_dim=7, num_layers=3)
    assert [cfg.layer_dims(i) for i in range(3)] == [(3, 5), (5, 5), (5, 7)]
    assert cfg.num_params == 15 + 25 + 35
    assert cfg.weight_bytes == 4 * cfg.num_params
    assert MLPConfig(2, 3, 5, 7, num_layers=1).layer_dims(0) == (3, 7)
    with pytest.raises(IndexError):
        cfg.layer_dims(3)
    # Frozen and hashable: a configuration can key a cache.
    assert hash(cfg) == hash(MLPConfig(2, 3, 5, 7, 3))
    with pytest.raises(AttributeError):
        cfg.num_layers = 4  # type: ignore[misc]


@pytest.mark.parametrize("kw, pattern", [
    ({"num_layers": 0}, "num_layers must be a positive integer"),
    ({"batch_size": 2.5}, "batch_size must be a positive integer"),
    ({"dtype": DType.Int64}, "dtype must be a floating-point DType"),
    ({"device": -1}, "device must be a non-negative integer"),
])
def test_bad_config_is_one_line_error(kw: dict, pattern: str) -> None:
    args = {"batch_size": 2, "input_dim": 3, "hidden_dim": 4, "output_dim": 5,
            "num_layers": 2} | kw
    with pytest.raises(ConfigError, match=pattern) as e:
        mlp(**args)
    assert isinstance(e.value, DistIRError) and "\n" not in str(e.value)
