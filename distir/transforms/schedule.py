"""Pipeline schedules: the order in which each stage runs its microbatches, and one program
order for all stages.

A *unit* is ``(kind, stage, microbatch)`` with ``kind`` ``"F"`` (the stage's forward on that
microbatch) or ``"B"`` (its backward). Dependencies: ``F(s, m)`` needs ``F(s-1, m)``;
``B(s, m)`` needs ``F(s, m)`` and ``B(s+1, m)``.

- **GPipe**: every stage runs all forwards, then all backwards (both in microbatch order).
- **1F1B** (synchronous, as in PipeDream-Flush and Megatron-LM): stage ``s`` first runs
  ``min(pp - s - 1, K)`` warm-up forwards, then alternates one forward and one backward, then
  runs the remaining backwards. At most ``pp - s`` microbatches are in flight on stage ``s``.

``ticks`` merges the per-stage orders into one program order: in each tick every stage runs
its next unit if that unit's dependencies finished in earlier ticks. A transform emits the
units of a tick, then the transfers they produce; each device then sees exactly its stage's
order, and every transfer comes right after the unit that produced its value.
"""

from __future__ import annotations

from distir.errors import TransformError

__all__ = ["SCHEDULES", "Unit", "stage_order", "ticks"]

SCHEDULES = ("gpipe", "1f1b")
"""The schedule names ``dtp`` accepts."""

Unit = tuple[str, int, int]
"""``(kind, stage, microbatch)``; kind is ``"F"`` or ``"B"``."""


def stage_order(schedule: str, stage: int, pp: int, k: int, backward: bool) -> list[Unit]:
    """The units stage ``stage`` runs, in order, for ``k`` microbatches on ``pp`` stages.

    >>> [f"{u[0]}{u[2]}" for u in stage_order("1f1b", 0, 3, 4, True)]
    ['F0', 'F1', 'F2', 'B0', 'F3', 'B1', 'B2', 'B3']
    >>> [f"{u[0]}{u[2]}" for u in stage_order("gpipe", 0, 3, 2, True)]
    ['F0', 'F1', 'B0', 'B1']
    """
    if schedule not in SCHEDULES:
        raise TransformError(f"unknown schedule {schedule!r}: choose one of "
                             f"{', '.join(SCHEDULES)}")
    fwd = [("F", stage, m) for m in range(k)]
    if not backward:
        return fwd
    bwd = [("B", stage, m) for m in range(k)]
    if schedule == "gpipe":
        return fwd + bwd
    warm = min(pp - stage - 1, k)
    order = fwd[:warm]
    for i in range(k - warm):
        order.append(fwd[warm + i])
        order.append(bwd[i])
    order.extend(bwd[k - warm:])
    return order


def ticks(schedule: str, pp: int, k: int, backward: bool) -> list[list[Unit]]:
    """The units of all stages merged into ticks: a unit runs in the first tick after its
    stage's previous unit and its dependencies.

    >>> [[f"{u[0]}{u[1]}{u[2]}" for u in t] for t in ticks("gpipe", 2, 2, False)]
    [['F00'], ['F01', 'F10'], ['F11']]
    """
    orders = [stage_order(schedule, s, pp, k, backward) for s in range(pp)]
    pos = [0] * pp
    done: set[Unit] = set()
    out: list[list[Unit]] = []
    remaining = sum(len(o) for o in orders)
    while remaining:
        tick: list[Unit] = []
        for s in range(pp):
            if pos[s] == len(orders[s]):
                continue
            u = orders[s][pos[s]]
            kind, _, m = u
            if kind == "F":
                ready = s == 0 or ("F", s - 1, m) in done
            else:
                ready = ("F", s, m) in done and (s == pp - 1 or ("B", s + 1, m) in done)
            if ready:
                tick.append(u)
                pos[s] += 1
        if not tick:  # pragma: no cover - the two schedules above never deadlock
            raise TransformError(f"the {schedule} schedule deadlocks for pp={pp}, K={k}")
        done.update(tick)
        remaining -= len(tick)
        out.append(tick)
    return out
