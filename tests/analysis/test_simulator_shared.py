"""A simulator shared by several programs (``share_equal_functions``, as a search's workers
use it) gives each program the figures of a fresh simulation: calls of equal functions of
different programs share one summary, and nothing of one program leaks into the next."""

from __future__ import annotations

import pytest

from distir.analysis.simulator import Simulator, simulate
from distir.ir.inline import inline_calls
from distir.transforms import tower
from tests.analysis.test_simulator_calls import HW, _random_program, assert_same


@pytest.mark.parametrize("start", range(0, 40, 8))
def test_random_programs_in_one_simulator_equal_fresh_and_inlined(start: int) -> None:
    """Each seed's program twice (equal callees as new objects) and its neighbours'
    (callees of the same names and arity, other bodies) through one simulator."""
    sim = Simulator(HW, share_equal_functions=True)
    for seed in range(start, start + 8):
        for _ in range(2):
            fn = _random_program(seed)
            got = sim.simulate_function(fn)
            assert_same(got, simulate(fn, HW))
            assert_same(got, simulate(inline_calls(fn), HW))


def test_search_configurations_share_summaries() -> None:
    from distir.models import mlp
    from distir.transforms import analyze, dtp

    seq = analyze(mlp(batch_size=16, input_dim=8, hidden_dim=16, output_dim=4, num_layers=4))
    cfgs = [(2, 1, 1, 1), (1, 2, 2, 2), (2, 2, 2, 4), (1, 1, 2, 2), (2, 2, 2, 4)]
    sim = Simulator(HW, share_equal_functions=True)
    counts = []
    for cfg in cfgs:
        fn = dtp(seq, *cfg)
        assert_same(sim.simulate_function(fn, 16), simulate(fn, HW, 16))
        counts.append(len(sim._summaries))
    # The repeated configuration is a new program of equal functions: no new summary.
    assert counts[-1] == counts[-2]
    # What the last program's function objects were kept for is forgotten after it.
    assert not sim._rep_of
    reps = {id(f) for f in sim._reps or ()}
    assert all(k[0] in reps for k in sim._live_memo.facts)


def test_without_sharing_equal_functions_are_summarized_apart() -> None:
    sim = Simulator(HW)
    sim.simulate_function(_random_program(3))
    n = len(sim._summaries)
    sim.simulate_function(_random_program(3))
    assert n > 0 and len(sim._summaries) == 2 * n


def test_large_functions_are_not_kept_between_programs(monkeypatch: pytest.MonkeyPatch,
                                                       ) -> None:
    """A function larger than ``KEEP_INPUTS`` (dtp's ``@replica``) is shared by the calls of
    one program, then forgotten with its summaries, and op records beyond ``KEEP_RECORDS``
    are dropped; the next programs' figures are still those of fresh simulations, and the
    small (stage and layer) functions stay shared."""
    import distir.analysis.simulator as simulator
    from distir.models import mlp
    from distir.transforms import analyze

    seq = analyze(mlp(batch_size=16, input_dim=8, hidden_dim=16, output_dim=4, num_layers=4))
    fn = tower.dtp(seq, 2, 1, 2, 4)
    (rep,) = {id(op.callee): op.callee for op in fn.ops
              if op.callee is not None and op.callee.name == "replica"}.values()
    size = sum(len(op.inputs) for op in rep.ops)
    monkeypatch.setattr(simulator, "KEEP_INPUTS", size - 1)
    monkeypatch.setattr(simulator, "KEEP_RECORDS", 0)  # op records dropped after each
    sim = Simulator(HW, share_equal_functions=True)
    for cfg in [(2, 1, 2, 4), (2, 1, 2, 4), (2, 2, 2, 4)]:
        fn = tower.dtp(seq, *cfg)
        assert_same(sim.simulate_function(fn, 16), simulate(fn, HW, 16))
        kept = {f.name for f in sim._reps or ()}
        assert "replica" not in kept and {"stage0_fwd", "stage1_bwd"} <= kept
        assert all(sim._callees.get(k[0]) is not None for k in sim._summaries)
