"""Optimizer state drawn as a training step holds it: ``state_roles`` finds the inputs of
Adam's second moments and step count through calls, structurally; the numpy and the
backend's random draws make them non-negative and 1."""

from __future__ import annotations

import numpy as np

from distir.analysis import random_inputs
from distir.analysis.state import state_roles
from distir.ir import parse
from distir.transforms import dtp, training_step

FORWARD = """func @main(%x: Tensor[Float32, (8, 6), 0], %w0: Tensor[Float32, (6, 4), 0],
           %b0: Tensor[Float32, (4,), 0], %w1: Tensor[Float32, (4, 2), 0]) {
  %h = MatMul(%x, %w0)
  %hb = Add(%h, %b0)
  %a = Relu(%hb)
  %y = MatMul(%a, %w1)
  return %y
}
"""

CALLED = """func @upd(%w: Tensor[Float32, (4,), 0], %g: Tensor[Float32, (4,), 0],
          %m: Tensor[Float32, (4,), 0], %v: Tensor[Float32, (4,), 0],
          %s: Tensor[Float32, (), 0]) {
  %w2, %m2, %v2 = AdamOptimizer(%w, %g, %m, %v, %s, lr=0.01, beta1=0.9, beta2=0.999, eps=1e-08)
  return %w2, %m2, %v2
}

func @main(%a: Tensor[Float32, (4,), 0], %b: Tensor[Float32, (4,), 0],
           %c: Tensor[Float32, (4,), 0], %d: Tensor[Float32, (4,), 0],
           %step: Tensor[Float32, (), 0], %e: Tensor[Float32, (4,), 0]) {
  %f = Relu(%b)
  %w2, %m2, %v2 = call @upd(%a, %f, %c, %d, %step)
  %x = SGDOptimizer(%w2, %e, lr=0.1)
  return %x, %m2, %v2
}
"""


def _adam_step():
    return training_step(parse(FORWARD).entry, optimizer="adam", wrt=["w0", "b0", "w1"])


def test_roles_through_a_call() -> None:
    """The caller's parameters bound to the callee's moments and count are found; an
    argument computed in the caller, and SGD's inputs, are not state."""
    fn = parse(CALLED).entry
    assert state_roles(fn) == {3: "square", 4: "count"}


def test_roles_of_a_training_step_and_its_distributions() -> None:
    step = _adam_step()
    names = {i: p.name for i, p in enumerate(step.params)}
    roles = state_roles(step)
    assert sorted(roles.values()).count("square") == 3
    assert [names[i] for i, r in roles.items() if r == "count"] == ["adam_step"]
    for fn in (dtp(step, dp=2), dtp(step, tp=2), dtp(step, pp=2, microbatches=2)):
        r = state_roles(fn)  # (each device has its own copy of the count)
        counts = [i for i, role in r.items() if role == "count"]
        assert counts and all(fn.params[i].type.shape == () for i in counts)
        assert list(r.values()).count("square") >= 3


def test_roles_through_a_zero_shard_and_an_integer_count() -> None:
    """Under ZeRO a rank's moments are a ``Split`` of the whole parameter: still found; a
    step count of an integer type is drawn as 1 too."""
    from distir.transforms import synchronize

    step = _adam_step()
    for builder in ("zero-1", "zero-2"):
        fn = synchronize(dtp(step, dp=2), {"builder": builder})
        moments = [i for i, p in enumerate(fn.params) if "adam_v" in (p.name or "")]
        roles = state_roles(fn)
        assert moments and all(roles.get(i) == "square" for i in moments), builder
    text = CALLED.replace("%s: Tensor[Float32, (), 0]", "%s: Tensor[Int64, (), 0]").replace(
        "%step: Tensor[Float32, (), 0]", "%step: Tensor[Int64, (), 0]")
    fn = parse(text).entry
    for seed in range(4):
        assert int(random_inputs(fn, seed=seed)[4]) == 1


def test_numpy_draw() -> None:
    step = _adam_step()
    roles = state_roles(step)
    ins = random_inputs(step, seed=3)
    for i, x in enumerate(ins):
        if roles.get(i) == "square":
            assert (x >= 0).all() and x.any()
        elif roles.get(i) == "count":
            assert x.shape == () and float(x) == 1.0
    assert any((x < 0).any() for i, x in enumerate(ins) if i not in roles)


def test_backend_draw() -> None:
    import torch

    from distir.backend.worker import draw_inputs

    fn = parse(CALLED).entry
    gen = torch.Generator().manual_seed(0)
    a, b, c, d, step, e = draw_inputs(fn, torch.device("cpu"), gen)
    assert float(step) == 1.0 and (d >= 0).all()
    given = [None, None, None, np.full(4, -1.0, np.float32), None, None]
    assert (draw_inputs(fn, torch.device("cpu"), gen, given)[3] == -1).all()  # given wins
