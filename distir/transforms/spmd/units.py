"""The schedule pass: the order in which pipeline stages run their microbatches.

``schedule(stages, microbatches, kind)`` -> ``Schedule``: the units ``(phase, stage,
microbatch)`` of every stage in GPipe or 1F1B order (``distir.transforms.schedule``),
merged into ticks (every unit of a tick depends only on units of earlier ticks);
``dumps``, ``check``. ``lower_pipeline`` writes the program in this order.
``stage_meshes`` gives each stage's devices as ``dtp`` numbers them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from distir.errors import TransformError
from distir.transforms.schedule import SCHEDULES, Unit, stage_order, ticks
from distir.transforms.spmd.mesh import Mesh
from distir.transforms.spmd.stages import StagePartition

__all__ = ["Schedule", "schedule", "stage_meshes"]


@dataclass(frozen=True, eq=False)
class Schedule:
    """``ticks``: the units of all stages in program order, grouped in ticks (every unit of
    a tick depends only on units of earlier ticks)."""

    kind: str
    pp: int
    microbatches: int
    training: bool
    ticks: tuple[tuple[Unit, ...], ...]

    def check(self) -> None:
        """Raise ``TransformError`` unless every stage runs its units in the order of
        ``kind`` and each unit comes after the units it depends on."""
        done: set[Unit] = set()
        seen: list[list[Unit]] = [[] for _ in range(self.pp)]
        for tick in self.ticks:
            for u in tick:
                kind, s, m = u
                need = [("F", s - 1, m)] if kind == "F" and s else []
                if kind == "B":
                    need = [("F", s, m)] + ([("B", s + 1, m)] if s + 1 < self.pp else [])
                for x in need:
                    if x not in done:
                        raise TransformError(f"unit {_u(u)} runs before {_u(x)}")
                seen[s].append(u)
            done.update(tick)
        for s in range(self.pp):
            want = stage_order(self.kind, s, self.pp, self.microbatches, self.training)
            if seen[s] != want:
                raise TransformError(f"stage {s} runs {' '.join(map(_u, seen[s]))}, "
                                     f"not the {self.kind} order")

    def dumps(self) -> str:
        """One line per tick: ``tick 3: F1.2 B0.0`` (phase, stage, microbatch)."""
        head = (f"// {self.kind}, {self.pp} stages, {self.microbatches} microbatches"
                f"{', training' if self.training else ''}")
        return "\n".join([head] + [f"tick {n}: " + " ".join(map(_u, t))
                                   for n, t in enumerate(self.ticks)]) + "\n"


def _u(u: Unit) -> str:
    return f"{u[0]}{u[1]}.{u[2]}"


def schedule(stages: StagePartition, microbatches: int = 1, kind: str = "gpipe",
             ) -> Schedule:
    """The units of ``stages`` for ``microbatches`` in the ``"gpipe"`` or ``"1f1b"``
    order; checked."""
    if not isinstance(microbatches, int) or isinstance(microbatches, bool) or microbatches < 1:
        raise TransformError(f"microbatches must be a positive integer, got {microbatches!r}")
    if kind not in SCHEDULES:
        raise TransformError(f"unknown schedule {kind!r}: choose one of {', '.join(SCHEDULES)}")
    training = any(p == "B" for p in stages.phase)
    out = Schedule(kind, stages.pp, microbatches, training,
                   tuple(tuple(t) for t in ticks(kind, stages.pp, microbatches, training)))
    out.check()
    return out


def stage_meshes(shape: tuple[int, ...], pp: int) -> list[Mesh]:
    """The sub-mesh of each of ``pp`` stages, devices numbered as ``dtp`` does: data
    coordinate ``d``, inner coordinate ``j`` of stage ``s`` is ``(d * pp + s) * inner + j``."""
    inner = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    return [Mesh(tuple(shape), tuple((d * pp + s) * inner + j for d in range(shape[0])
                                     for j in range(inner))) for s in range(pp)]
