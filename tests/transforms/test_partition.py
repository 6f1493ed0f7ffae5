"""Pipeline stages by cost: any straight-line program is cut into ``pp`` stages, balanced
by the cost rules, with repeated layers kept whole; the distributed programs compute the
sequential results (reference executor)."""

from __future__ import annotations

import numpy as np
import pytest

import distir
from distir.analysis import random_inputs
from distir.errors import TransformError
from distir.ir.core import Function
from distir.transforms import analyze, dtp, tower, training_step
from tests.transforms.helpers import check_equivalent, small_gpt2, small_mlp


def _irregular(batch: int = 8) -> Function:
    """No repeated layers: one wide product, then narrow ones with different activations."""
    return distir.parse(f"""func @main(%x: Tensor[Float32, ({batch}, 16), 0],
        %w0: Tensor[Float32, (16, 64), 0], %w1: Tensor[Float32, (64, 8), 0],
        %w2: Tensor[Float32, (8, 8), 0], %w3: Tensor[Float32, (8, 4), 0]) {{
  %a = MatMul(%x, %w0)
  %b = Tanh(%a)
  %c = MatMul(%b, %w1)
  %d = Relu(%c)
  %e = MatMul(%d, %w2)
  %f = Sigmoid(%e)
  %g = MatMul(%f, %w3)
  return %g
}}""").entry

_W = ["w0", "w1", "w2", "w3"]


def _model(fn: Function) -> tuple:
    ins = tuple(random_inputs(fn, seed=3))
    return fn, analyze(fn), ins, tuple(distir.execute(fn, list(ins)))


def _stages(step: Function) -> int:
    return len({c.callee.name.split("_")[0] for c in step.ops if c.callee is not None
                and c.callee.name.startswith("stage")})


@pytest.mark.parametrize("pp", [2, 3, 4])
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_program_without_layers(pp: int, schedule: str) -> None:
    """Inference and the training step of a program with no repeated layers, under P and
    P with D and K."""
    fn = _irregular()
    check_equivalent(_model(fn), (1, 1, pp, 1), schedule)
    step = training_step(fn, loss="mse", optimizer="sgd", wrt=_W)
    check_equivalent(_model(step), (1, 1, pp, 2), schedule)
    check_equivalent(_model(step), (2, 1, pp, 2), schedule)
    assert _stages(tower.dtp(step, pp=pp)) == pp


@pytest.mark.parametrize("pp", [3])
def test_pp_need_not_divide_the_layers(pp: int) -> None:
    """A 4-layer MLP step and GPT-2 in 3 stages; layers stay whole (every layer function
    is still shared)."""
    check_equivalent(small_mlp(12), (1, 1, pp, 2), "1f1b")
    check_equivalent(small_gpt2(4), (1, 1, pp, 2), "1f1b")
    an = small_mlp(12)[1]
    st, units = an.structure, an.partition.stage_map(pp)
    for a in range(1, st.num_layers + 1):  # each layer's positions in one stage
        assert len({int(units[u]) for u, lay in enumerate(st.unit_layer) if lay == a}) == 1


def test_balanced_by_cost() -> None:
    """The wide first product is a stage of its own; the narrow rest shares the other."""
    an = analyze(training_step(_irregular(batch=64), loss="mse", optimizer="sgd",
                                wrt=_W))
    pt = an.partition
    units = pt.stage_map(2)
    cuts = [int(c) for c in np.flatnonzero(np.diff(units)) + 1]
    assert len(cuts) == 1
    # no other valid cut has a faster slowest stage
    for c in np.flatnonzero(pt.valid):
        assert pt.slowest(cuts) <= pt.slowest([int(c)]) + 1e-15


def test_uniform_layers_unchanged() -> None:
    """pp dividing the layers of a builder's model keeps equal layers per stage."""
    an = small_mlp(8)[1]
    st = an.structure
    for pp in (2, 4):
        units = an.partition.stage_map(pp)
        for u, lay in enumerate(st.unit_layer):
            if 1 <= lay <= st.num_layers:
                assert units[u] == (lay - 1) * pp // st.num_layers


def test_trained_weight_shared_by_stages() -> None:
    """A weight read by the first and the last product (tied), trained, in 2 and 3 stages
    with D and K: each stage's part of its gradient is summed on the update's stage."""
    fn = distir.parse("""func @main(%x: Tensor[Float32, (8, 8), 0], %w: Tensor[Float32, (8, 8), 0],
        %v: Tensor[Float32, (8, 8), 0], %u: Tensor[Float32, (8, 8), 0]) {
  %a = MatMul(%x, %w)
  %b = Tanh(%a)
  %c = MatMul(%b, %v)
  %d = Relu(%c)
  %e = MatMul(%d, %u)
  %f = Sigmoid(%e)
  %g = MatMul(%f, %w)
  return %g
}""").entry
    step = training_step(fn, loss="mse", optimizer="sgd", wrt=["w", "v", "u"])
    for cfg in ((1, 1, 2, 1), (2, 1, 3, 2), (1, 1, 4, 2)):
        check_equivalent(_model(step), cfg, "1f1b")


def test_more_stages_than_cuts_refused() -> None:
    with pytest.raises(TransformError, match=r"^error: pp=5 is more pipeline stages than "
                       r"@main can be cut into \(4 at most\)$"):
        dtp(_irregular(), pp=5)


def test_stages_weighed_on_the_profile_simulated() -> None:
    """``analyze(hardware=...)`` balances stages with that profile's cost rules (the one the
    search simulates), not the default's; ``dtp`` takes it too, but not beside an
    ``Analysis``; the grid search's workers analyse on the search's profile."""
    from distir.analysis.hardware import load_hardware
    from distir.transforms.partition import _costs
    from grid_search import search, workload

    step = training_step(_irregular(batch=64), loss="mse", optimizer="sgd", wrt=_W)
    h200 = load_hardware("h200-sxm")
    default, other = analyze(step).partition, analyze(step, hardware="h200-sxm").partition
    assert other.hardware is h200 and default.hardware is None
    got = other._cost_arrays()
    want = _costs(other.st, other.n, h200)
    assert all(np.array_equal(g, w) for g, w in zip(got, want))
    assert not np.allclose(got[0], default._cost_arrays()[0])  # the profiles weigh differently
    assert _stages(tower.dtp(step, pp=2, hardware=h200)) == 2
    with pytest.raises(TransformError, match="pass hardware to analyze"):
        tower.dtp(analyze(step), pp=2, hardware=h200)
    search._init_worker(workload("mlp-2-32"), "h200-sxm")
    try:
        assert search._model(8).partition.hardware is h200
    finally:
        search._init_worker(None, None)  # type: ignore[arg-type]
