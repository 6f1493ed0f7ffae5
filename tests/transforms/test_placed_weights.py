"""A distributed imported model keeps its weights: the placed program's initializers are
the parts that the self-contained program's own prologue sends to each device."""

from __future__ import annotations

import numpy as np
import pytest

import distir
from distir.analysis import random_inputs
from distir.analysis.api import bind_inputs
from distir.analysis.interpreter import NumpyInterpreter
from distir.transforms import dtp, tower

from .helpers import cfg_id


def _bound_mlp():
    fn = distir.models.mlp(batch_size=16, input_dim=8, hidden_dim=8, output_dim=8,
                           num_layers=4)
    vals = random_inputs(fn, seed=3)
    # Weights bound, as an import binds them; the batch (x, y) stays an input.
    fn.initializers = {p.name: a for p, a in zip(fn.params, vals)
                       if p.name and p.name.startswith("w")}
    return fn, vals


@pytest.mark.parametrize("cfg", [(1, 2, 1, 1), (2, 2, 1, 1), (2, 2, 2, 2), (1, 4, 2, 2)],
                         ids=cfg_id)
def test_placed_initializers_are_what_distribute_sends(cfg) -> None:
    fn, vals = _bound_mlp()
    d, t, p, k = cfg
    placed = tower.dtp(fn, dp=d, tp=t, pp=p, microbatches=k)
    whole = tower.dtp(fn, dp=d, tp=t, pp=p, microbatches=k, self_contained=True)
    assert placed.initializers and set(placed.initializers) <= {
        q.name for q in placed.params}
    # Every placed parameter that holds a part of a weight is bound.
    assert {q.name for q in placed.params if q.name and q.name.startswith("w")} == set(
        placed.initializers)
    sent: dict[str, np.ndarray] = {}

    def listen(op, ins, outs) -> None:
        for v, o in zip(op.outputs, outs):
            if v.name in placed.initializers:
                sent[v.name] = o

    interp = NumpyInterpreter([listen])
    interp.run(whole, bind_inputs(whole, [vals[fn.params.index(q)] for q in fn.params
                                          if q.name not in fn.initializers]))
    for name, a in placed.initializers.items():
        ref = sent.get(name)
        if ref is None:  # a whole copy kept on device 0 is the parameter itself
            ref = fn.initializers[name] if name in fn.initializers else None
        assert ref is not None, name
        np.testing.assert_array_equal(a, ref, err_msg=name)


def test_transform_cli_writes_the_weights_beside(tmp_path) -> None:
    from distir.cli import main
    from distir.ir.text import weights_path

    fn, vals = _bound_mlp()
    src = tmp_path / "step.dir"
    src.write_text(distir.dumps(fn), encoding="utf-8")
    np.savez(weights_path(src), **fn.initializers)
    out = tmp_path / "step_t2.dir"
    assert main(["transform", str(src), "--tp", "2", "--dp", "2", "-o", str(out)]) == 0
    m = distir.load(out)  # picks up step_t2.npz by name
    placed = dtp(fn, dp=2, tp=2)
    assert set(m.initializers) == set(placed.initializers)
    for k, a in placed.initializers.items():
        np.testing.assert_array_equal(m.initializers[k], a)
    # Only the batch (x, y on each device) is left for the caller to give.
    free = {q.name[0] for q in m.entry.params if q.name not in m.initializers}
    assert free == {"x", "y"}
    # execute and simulate find the weights next to the file by name, as after an import.
    assert main(["execute", str(out), "--json"]) == 0
    assert main(["simulate", str(out), "--json"]) == 0


def test_scalar_initializers_keep_their_shape() -> None:
    """Adam's step counter is 0-d: each device's copy stays 0-d (and types, and simulates)."""
    from distir.ir import DType, FunctionBuilder, TensorType
    from distir.transforms import training_step

    b = FunctionBuilder("main")
    x = b.param("x", TensorType(DType.Float32, (8, 4), 0))
    w = b.param("w", TensorType(DType.Float32, (4, 4), 0))
    fn = b.ret(b.op("MatMul", x, w, name="y"))
    fn.initializers = {"w": np.ones((4, 4), np.float32)}
    step = training_step(fn, loss="mse", optimizer="adam", lr=0.1)
    assert any(np.asarray(a).shape == () for a in step.initializers.values())
    placed = dtp(step, dp=2)
    for q in placed.params:
        if q.name in placed.initializers:
            assert placed.initializers[q.name].shape == q.type.shape, q.name
    distir.simulate(placed, hardware="h100-sxm")
