"""Stage partitioning as a pass: which pipeline stage each op of a sequential step runs in.

``partition_stages(fn, pp, hardware=...)`` returns a ``StagePartition``: a stage
``0 .. pp-1`` for every live op of the call-free typed program (``Program``), printable
(``dumps``) and checkable (``check``). The cuts are those of ``dtp``'s partitioning
(``distir.transforms.partition``): contiguous ranges of forward *positions* balanced by the
simulated cost of their ops (forward, backward and update) and of the activations sent
across each cut, repeated layers kept whole when they hold most of the cost; a backward op
runs on the stage of its forward (``Structure.pos``), an optimizer update on the stage of
its weight's last reader.

Ops that do not depend on the batch and are not updates (constants, shape arithmetic,
weight-only ops such as a tied LM head's ``Transpose``) have no position; each runs on the
earliest stage that reads its result (a value known before running is recomputed on every
stage that reads it by the lowering).

Invariant (``check``): every live op has a stage in ``0 .. pp-1``, every stage runs a
forward op, forward values flow to the same or later stages, and backward values (those
computed from a loss gradient) to the same or earlier ones; so the stages form a pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from distir.errors import TransformError
from distir.ir.core import Function, Module
from distir.transforms.program import SHAPE_OPS, Program
from distir.transforms.spmd.propagate import program_of

if TYPE_CHECKING:
    from distir.transforms.plan import Analysis

__all__ = ["StagePartition", "partition_stages"]


@dataclass(frozen=True, eq=False)
class StagePartition:
    """``stage[i]``: the stage of op ``i`` of ``prog.ops`` (``None`` for a dead op);
    ``backward``: the indices of the backward ops; ``phase[i]`` ``"F"``, ``"B"`` or
    ``"U"`` (run once after all microbatches: updates) or ``"H"`` (independent of the
    batch) for live ops. ``structure``: the analysis it was cut from (batch inputs,
    values summed over the batch), reused by the schedule."""

    prog: Program
    pp: int
    stage: tuple[int | None, ...]
    phase: tuple[str | None, ...]
    structure: Any = None
    _checked: list[bool] = field(default_factory=list, repr=False)
    """``[True]`` once ``check`` passed (the partition never changes)."""

    def ops_of(self, s: int) -> list[int]:
        """The live ops of stage ``s``, in program order."""
        return [i for i, x in enumerate(self.stage) if x == s]

    def check(self) -> None:
        """Raise ``TransformError`` naming the first op that breaks the invariant (see the
        module docstring)."""
        if self._checked:
            return
        prog, pp = self.prog, self.pp
        forward = [False] * pp
        for i in prog.live_ops:
            s = self.stage[i]
            op = prog.ops[i]
            if s is None or not 0 <= s < pp:
                raise TransformError(f"`{prog.op_text(op)}` has no stage in 0..{pp - 1} "
                                     f"(got {s})")
            ph = self.phase[i]
            if ph == "F":
                forward[s] = True
            if op.op_type in SHAPE_OPS:  # reads its input's shape only, known before running
                continue
            for v in op.inputs:
                j = prog.producer.get(v) if v is not None else None
                if v is None or j is None or self.phase[j] not in ("F", "B"):
                    continue
                s0 = self.stage[j]
                assert s0 is not None
                if self.phase[j] == "F" and s0 > s:
                    raise TransformError(f"`{prog.op_text(op)}` (stage {s}) reads the forward "
                                         f"value {prog.value_text(v)} of a later stage ({s0})")
                if self.phase[j] == "B" and ph in ("F", "B") and s0 < s:
                    raise TransformError(f"`{prog.op_text(op)}` (stage {s}) reads the backward "
                                         f"value {prog.value_text(v)} of an earlier stage ({s0})")
        empty = [s for s in range(pp) if not forward[s]] if pp > 1 else []
        if empty:
            raise TransformError(f"stage {empty[0]} of {pp} runs no forward op")
        self._checked.append(True)

    def dumps(self) -> str:
        """The program with each live op's stage and phase as a comment."""
        prog = self.prog
        lines = [f"// {self.pp} pipeline stages", f"func @{prog.fn.name}("]
        lines += [f"    %{p.name}" for p in prog.fn.params]
        lines.append(") {")
        for i in prog.live_ops:
            lines.append(f"  {prog.op_text(prog.ops[i])}  // stage {self.stage[i]} "
                         f"{self.phase[i]}")
        lines.append("  return " + ", ".join(f"%{v.name}" for v in prog.fn.returns))
        lines.append("}")
        return "\n".join(lines) + "\n"


def partition_stages(fn: Function | Module | Program | Analysis, pp: int,
                     hardware: Any = "h100-sxm", batch_inputs: list[str] | None = None,
                     ) -> StagePartition:
    """Cut ``fn`` into ``pp`` pipeline stages balanced by simulated cost on ``hardware``
    (a profile name or ``Hardware``), as ``dtp`` does; checked. ``batch_inputs`` names the
    parameters whose axis 0 is the batch (default: found by ``dtp``'s analysis). An
    ``Analysis`` (``distir.transforms.analyze``) gives its program, structure and cost
    balance (its own hardware; ``hardware`` and ``batch_inputs`` are not read), so that
    configurations share them."""
    from distir.analysis.hardware import load_hardware
    from distir.transforms.partition import StagePartition as Cuts
    from distir.transforms.plan import Analysis
    from distir.transforms.sharding import Sharding
    from distir.transforms.structure import HOIST, POST, Structure

    if not isinstance(pp, int) or isinstance(pp, bool) or pp < 1:
        raise TransformError(f"pp must be a positive integer, got {pp!r}")
    if isinstance(fn, Analysis):
        prog, st = fn.prog, fn.structure
        units = fn.partition.stage_map(pp)
    else:
        prog = program_of(fn)
        st = Structure(prog, Sharding(prog, batch_inputs))
        units = Cuts(st, load_hardware(hardware)).stage_map(pp)
    n_fwd = sum(1 for i in st.pos if st.kind[i] != POST and i not in st.backward)
    if pp > max(n_fwd, 1):
        raise TransformError(f"pp={pp} is more pipeline stages than the {n_fwd} forward ops "
                             f"of @{prog.fn.name} that depend on the batch")
    stage: list[int | None] = [None] * len(prog.ops)
    phase: list[str | None] = [None] * len(prog.ops)
    for i, p in st.pos.items():
        stage[i] = int(units[p])
        phase[i] = "U" if st.kind[i] == POST else "B" if i in st.backward else "F"
    for i in reversed(prog.live_ops):  # batch-independent ops: their earliest reader's stage
        if st.kind[i] != HOIST:
            continue
        readers = [stage[u] for o in prog.ops[i].outputs for u in prog.users.get(o, ())
                   if stage[u] is not None]
        stage[i] = min(readers, default=0)  # type: ignore[type-var]
        phase[i] = "H"
    out = StagePartition(prog, pp, tuple(stage), tuple(phase), st)
    out.check()
    return out
