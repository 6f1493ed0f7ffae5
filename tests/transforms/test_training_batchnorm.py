"""``training_step(batchnorm=...)``: an inference-mode ``BatchNormalization`` trained with
the batch's statistics (``"train"``) or its fixed running ones (``"keep"``), against
``torch.nn.BatchNorm2d`` in train and eval mode; the step lowers and runs on the CPU."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from distir.errors import ConfigError
from distir.ir import DType, FunctionBuilder, TensorType
from distir.ir.core import Function
from distir.transforms import training_step

N, C, M, H, K = 4, 3, 5, 6, 7
F32 = DType.Float32


def _weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"conv.w": (0.3 * rng.standard_normal((M, C, 3, 3))).astype(np.float32),
            "bn.w": (1 + 0.1 * rng.standard_normal(M)).astype(np.float32),
            "bn.b": (0.1 * rng.standard_normal(M)).astype(np.float32),
            "bn.mean": (0.2 * rng.standard_normal(M)).astype(np.float32),
            "bn.var": (0.5 + rng.random(M)).astype(np.float32),
            "fc.w": (0.3 * rng.standard_normal((M, K))).astype(np.float32)}


def forward() -> Function:
    """Conv 3x3 (pad 1), BatchNormalization (inference mode), Relu, GlobalAveragePool,
    Flatten, MatMul: weights bound to initializers."""
    w = _weights()
    b = FunctionBuilder("cnn")
    x = b.param("x", TensorType(F32, (N, C, H, H), 0))
    ps = {k: b.param(k, TensorType(F32, v.shape, 0)) for k, v in w.items()}
    y = b.op("Conv", x, ps["conv.w"], pads=[1, 1, 1, 1])
    y = b.op("BatchNormalization", y, ps["bn.w"], ps["bn.b"], ps["bn.mean"], ps["bn.var"],
             epsilon=1e-5)
    y = b.op("Flatten", b.op("GlobalAveragePool", b.op("Relu", y)))
    fn = b.ret(b.op("MatMul", y, ps["fc.w"]))
    fn.initializers = dict(w)
    return fn


def torch_step(train: bool, x: np.ndarray, target: np.ndarray, lr: float) -> dict[str, Any]:
    w = {k: torch.tensor(v, requires_grad=k in ("conv.w", "bn.w", "bn.b", "fc.w"))
         for k, v in _weights().items()}
    y = torch.nn.functional.conv2d(torch.tensor(x), w["conv.w"], padding=1)
    y = torch.nn.functional.batch_norm(y, w["bn.mean"].clone(), w["bn.var"].clone(),
                                       w["bn.w"], w["bn.b"], train, 0.1, 1e-5)
    y = torch.relu(y).mean(dim=(2, 3)) @ w["fc.w"]
    loss = torch.nn.functional.cross_entropy(y, torch.tensor(target), reduction="sum")
    loss.backward()
    return {"loss": loss.item(), **{k: (v - lr * v.grad).detach().numpy()
                                    for k, v in w.items() if v.grad is not None}}


@pytest.mark.parametrize("mode", ["keep", "train"])
def test_batchnorm_mode_matches_torch(mode: str) -> None:
    import distir

    wrt = ["conv.w", "bn.w", "bn.b", "fc.w"]
    step = training_step(forward(), loss="cross_entropy", optimizer="sgd", lr=0.1, wrt=wrt,
                         batchnorm=mode)
    bns = [op for op in step.ops if op.op_type == "BatchNormalization"]
    assert [int(op.attrs.get("training_mode", 0)) for op in bns] == [int(mode == "train")]
    rng = np.random.default_rng(1)
    x = rng.standard_normal((N, C, H, H)).astype(np.float32)
    target = rng.integers(0, K, (N,)).astype(np.int64)
    got = distir.execute(step, [x, target])
    ref = torch_step(mode == "train", x, target, 0.1)
    np.testing.assert_allclose(got[0], ref["loss"], rtol=1e-4)
    for name, new in zip(wrt, got[1:]):
        np.testing.assert_allclose(new, ref[name], rtol=1e-4, atol=1e-5)
    from tests.backend.test_lowering import check

    given = {"x": x, "target": target}
    check(step, [given[p.name] if p.name in given else step.initializers[p.name]
                 for p in step.params], rtol=1e-4, atol=1e-5)


def test_bad_batchnorm_option_is_one_line() -> None:
    with pytest.raises(ConfigError, match="batchnorm must be"):
        training_step(forward(), loss="cross_entropy", batchnorm="eval")
