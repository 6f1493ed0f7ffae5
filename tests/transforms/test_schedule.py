"""The GPipe and 1F1B schedules, alone and as written into a distributed program."""

from __future__ import annotations

import re

import pytest

import distir
from distir.ir.core import Function
from distir.transforms import stage_order, ticks, tower

SIZES = [(1, 1), (2, 1), (2, 4), (3, 2), (4, 8), (4, 3)]


@pytest.mark.parametrize("pp,k", SIZES)
def test_gpipe_runs_all_forwards_first(pp: int, k: int) -> None:
    for s in range(pp):
        order = stage_order("gpipe", s, pp, k, backward=True)
        assert order == [("F", s, m) for m in range(k)] + [("B", s, m) for m in range(k)]


@pytest.mark.parametrize("pp,k", SIZES)
def test_1f1b_bounds_microbatches_in_flight(pp: int, k: int) -> None:
    for s in range(pp):
        order = stage_order("1f1b", s, pp, k, backward=True)
        assert sorted(order) == sorted([("F", s, m) for m in range(k)] +
                                       [("B", s, m) for m in range(k)])
        in_flight = peak = 0
        for kind, _, _ in order:
            in_flight += 1 if kind == "F" else -1
            peak = max(peak, in_flight)
        assert peak == min(pp - s, k)
        warm = min(pp - s - 1, k)
        assert [u[0] for u in order[:warm]] == ["F"] * warm
        if k > warm:  # steady state: one forward, one backward
            steady = order[warm:warm + 2 * (k - warm)]
            assert [u[0] for u in steady] == ["F", "B"] * (k - warm)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("pp,k", SIZES)
def test_ticks_respect_dependencies_and_take_2_k_plus_pp_minus_1(schedule: str, pp: int,
                                                                   k: int) -> None:
    when: dict[tuple, int] = {}
    all_ticks = ticks(schedule, pp, k, backward=True)
    for i, tick in enumerate(all_ticks):
        assert len({u[1] for u in tick}) == len(tick)  # one unit per stage and tick
        for u in tick:
            when[u] = i
    assert len(when) == 2 * pp * k
    for (kind, s, m), i in when.items():
        if kind == "F" and s > 0:
            assert when[("F", s - 1, m)] < i
        if kind == "B":
            assert when[("F", s, m)] < i
            if s < pp - 1:
                assert when[("B", s + 1, m)] < i
    assert len(all_ticks) == 2 * (k + pp - 1)  # equal-time units: the ideal makespan
    for s in range(pp):  # each stage runs its own order
        assert sorted((i, u) for u, i in when.items() if u[1] == s) == \
            sorted((when[u], u) for u in stage_order(schedule, s, pp, k, True))


def _calls_per_stage(fn: Function, pp: int) -> list[list[tuple[str, int]]]:
    """Each stage's calls in program order, as (F|B, microbatch), read from replica 0."""
    out: list[list[tuple[str, int]]] = [[] for _ in range(pp)]
    for op in fn.ops:
        if op.callee is None:
            continue
        name = op.outputs[0].name or ""
        if "_dp" in name and "_dp0" not in name:
            continue
        s, phase = re.match(r"stage(\d+)_(fwd|bwd)", op.callee.name).groups()  # type: ignore[union-attr]
        m = int(re.search(r"_mb(\d+)", name).group(1))  # type: ignore[union-attr]
        out[int(s)].append(("F" if phase == "fwd" else "B", m))
    return out


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_program_order_is_each_stages_schedule(schedule: str) -> None:
    pp, k = 4, 8
    fn = distir.models.mlp(batch_size=16, input_dim=4, hidden_dim=8, output_dim=4,
                           num_layers=4)
    prog = tower.dtp(fn, dp=1, pp=pp, microbatches=k, schedule=schedule)
    calls = _calls_per_stage(prog, pp)
    for s in range(pp):
        assert calls[s] == [(u[0], u[2]) for u in stage_order(schedule, s, pp, k, True)]


def test_sends_follow_the_unit_that_produced_them() -> None:
    """Every Send comes after the call that defines its value, before any later call of
    the sending stage (so a stage never waits on a transfer queued behind its own work)."""
    fn = distir.models.mlp(batch_size=16, input_dim=4, hidden_dim=8, output_dim=4,
                           num_layers=4)
    prog = tower.dtp(fn, pp=4, microbatches=4)
    defined_at = {}
    for i, op in enumerate(prog.ops):
        for v in op.outputs:
            defined_at[v] = i
        if op.op_type == "Send":
            src = defined_at[op.inputs[0]]
            between = [o for o in prog.ops[src + 1:i] if o.callee is not None and
                       o.callee.name.startswith(prog.ops[src].callee.name[:7])]
            assert between == []
