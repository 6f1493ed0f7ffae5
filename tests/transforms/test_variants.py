"""Training steps beyond the reference MLP: Adam (trained moments split like their
weights), ``reduction="mean"`` losses (rescaled per shard), a returned loss (summed over
microbatches and replicas)."""

from __future__ import annotations

import numpy as np
import pytest

import distir
from distir.ir import DType, FunctionBuilder, TensorType
from distir.transforms import dtp, tower


def _step(adam: bool = False, mean: bool = False, loss: bool = False) -> distir.Function:
    b = FunctionBuilder("main")

    def ty(*shape: int) -> TensorType:
        return TensorType(DType.Float32, shape, 0)

    n = 4
    ws = [b.param(f"w{i}", ty(8, 8)) for i in range(n)]
    ms = [b.param(f"m{i}", ty(8, 8)) for i in range(n)] if adam else []
    vs = [b.param(f"v{i}", ty(8, 8)) for i in range(n)] if adam else []
    step = b.param("step", ty()) if adam else None
    x, y = b.param("x", ty(16, 8)), b.param("y", ty(16, 8))
    hs, acts = [], [x]
    for i, w in enumerate(ws):
        hs.append(b.op("MatMul", acts[-1], w, name=f"h{i}"))
        acts.append(b.op("Relu", hs[-1], name=f"a{i}"))
    kw = {"reduction": "mean"} if mean else {}
    outs = [b.op("MSELoss", acts[-1], y, name="loss", **kw)] if loss else []
    da = b.op("MSELossGrad", acts[-1], y, name="da", **kw)
    dws: list = [None] * n
    for i in reversed(range(n)):
        dh = b.op("ReluGrad", hs[i], da, name=f"dh{i}")
        da, dws[i] = b.op("MatMulGrad", acts[i], ws[i], dh,
                          name=(f"da{i - 1}" if i else "_", f"dw{i}"))
    for i in range(n):
        if adam:
            outs += b.op("AdamOptimizer", ws[i], dws[i], ms[i], vs[i], step, lr=0.01,
                         name=(f"w{i}_new", f"m{i}_new", f"v{i}_new"))
        else:
            outs.append(b.op("SGDOptimizer", ws[i], dws[i], lr=0.1, name=f"w{i}_new"))
    return b.ret(*outs)


def _inputs(fn: distir.Function) -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    out = []
    for p in fn.params:
        a = rng.standard_normal(p.type.shape).astype(np.float32)
        if p.name.startswith("v"):  # second moments are non-negative
            a = np.abs(a)
        if p.name == "step":
            a = np.array(1.0, np.float32)
        out.append(a)
    return out


@pytest.mark.parametrize("cfg", [(2, 2, 2, 2), (1, 4, 1, 4), (4, 1, 4, 2), (2, 2, 1, 1)],
                         ids=lambda c: "D{}T{}P{}K{}".format(*c))
@pytest.mark.parametrize("variant", ["adam", "mean", "loss", "mean_loss"])
def test_variant_matches_sequential(variant: str, cfg: tuple[int, int, int, int]) -> None:
    fn = _step(adam=variant == "adam", mean="mean" in variant, loss="loss" in variant)
    ins = _inputs(fn)
    want = distir.execute(fn, ins)
    got = distir.execute(dtp(fn, *cfg, self_contained=True), ins, check_types=False)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    distir.infer_types(dtp(fn, *cfg))


def test_adam_moments_are_split_like_their_weights() -> None:
    step = tower.dtp(_step(adam=True), tp=2)
    shapes = {p.name: p.type.shape for p in step.params}
    assert shapes["w0_tp0"] == shapes["m0_tp0"] == shapes["v0_tp0"] == (8, 4)
    assert shapes["w1_tp0"] == shapes["m1_tp0"] == shapes["v1_tp0"] == (4, 8)
