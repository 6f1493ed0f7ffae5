"""A layout assignment: every value's placement over a device mesh, and what each op reads.

``LayoutAssignment`` is the output of ``propagate`` (and of ``search_small``) and the input
of ``lower``. For every live op of the sequential program it records the specs the op
*reads* (one per input; a read that differs from the producer's spec is a redistribution,
lowered to collectives or local slices) and the ``Outcome`` the rules give for them (the
specs of its results). Parameters get the specs they are placed with. Ops whose results
are known before running (shape chains, small constants) are *constant*: every device
computes them whole (``Replicate``).

Invariant (``check``): each op's outcome is what the rules give for its reads, every spec
fits its value's shape on the mesh, and no read asks for a ``Partial`` that its producer
does not hold (a sum cannot be made from a whole value).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from distir.errors import TransformError
from distir.ir.core import Op, Value
from distir.transforms.program import SHAPE_OPERANDS, SHAPE_OPS, Program
from distir.transforms.spmd.mesh import Mesh, Partial, Spec, check_spec, spec_str
from distir.transforms.spmd.rules import NotLocal, OpRules, Outcome

__all__ = ["LayoutAssignment", "Redistribution", "is_constant_op", "is_shape_operand"]


def is_shape_operand(op: Op, k: int) -> bool:
    """Whether input ``k`` of ``op`` is a shape the lowering recomputes locally."""
    return (op.op_type, k) in SHAPE_OPERANDS


def is_constant_op(prog: Program, op: Op) -> bool:
    """Whether every result of ``op`` is known before running (lowered to constants): a
    ``Constant`` always, whatever its size (the type propagator keeps the values of small
    ones only: an export's index table of 8,192 rows is one)."""
    if op.op_type in SHAPE_OPS or (op.op_type == "Constant" and not op.inputs):
        return True
    return bool(op.outputs) and all(prog.const(o) is not None for o in op.outputs)


@dataclass(frozen=True, slots=True)
class Redistribution:
    """Input ``index`` of ``op`` reads ``value`` as ``dst``; its producer holds ``src``."""

    op: Op
    index: int
    value: Value
    src: Spec
    dst: Spec


@dataclass(frozen=True, eq=False)
class LayoutAssignment:
    """Placements of one sequential program (``prog``, call-free and typed) on ``mesh``.

    ``params``: one spec per parameter; ``reads[i]`` / ``outcomes[i]``: the specs op ``i``
    of ``prog.ops`` reads and its outcome (``None`` for a dead op; a constant op reads
    nothing). Compared by identity; cheap to build, ``check`` verifies it.
    """

    prog: Program
    mesh: Mesh
    params: tuple[Spec, ...]
    reads: tuple[tuple[Spec | None, ...] | None, ...]
    outcomes: tuple[Outcome | None, ...]
    _spec: dict[Value, Spec] = field(default_factory=dict, repr=False)
    _checked: set[tuple[int, ...]] = field(default_factory=set, repr=False)
    """The mesh shapes on which these placements pass ``check`` (shared by ``on``'s
    copies: ``check`` reads the mesh's shape alone)."""
    derived: dict[Any, Any] = field(default_factory=dict, repr=False)
    """What the lowering derives from these placements alone (``pipeline._Pipe``: each
    value's readers, each op's local attributes per mesh shape), shared by ``on``'s
    copies, so that configurations lowered from one assignment derive it once."""

    def __post_init__(self) -> None:
        if self._spec:  # ``on``'s copy: the specs of the same program and outcomes
            return
        for p, s in zip(self.prog.fn.params, self.params, strict=True):
            self._spec[p] = s
        for op, out in zip(self.prog.ops, self.outcomes, strict=True):
            if out is not None:
                for o, s in zip(op.outputs, out.outs, strict=True):
                    self._spec[o] = s

    def on(self, mesh: Mesh) -> LayoutAssignment:
        """The same placements on another mesh of as many axes (other devices, or axes of
        other sizes: the pipeline lowering widens the data axis by the microbatches);
        ``check`` says whether they still fit."""
        if mesh.ndim != self.mesh.ndim:
            raise TransformError(f"an assignment on a {self.mesh.ndim}-D mesh cannot move to "
                                 f"the {mesh.ndim}-D mesh {mesh}")
        return LayoutAssignment(self.prog, mesh, self.params, self.reads, self.outcomes,
                                _spec=self._spec, _checked=self._checked,
                                derived=self.derived)

    def passes(self) -> LayoutAssignment:
        """Record that these placements pass ``check`` on this mesh's shape, as
        ``propagate``'s result does by construction, so that ``check`` (the pipeline
        lowering's) returns at once; ``self``."""
        self._checked.add(self.mesh.shape)
        return self

    def spec(self, v: Value) -> Spec:
        """The spec ``v`` is produced with."""
        return self._spec[v]

    def redistributions(self) -> list[Redistribution]:
        """Every read that differs from its producer's spec, in program order."""
        out = []
        for op, reads in zip(self.prog.ops, self.reads, strict=True):
            if not reads:
                continue
            for k, (v, s) in enumerate(zip(op.inputs, reads, strict=True)):
                if v is not None and s is not None and s != self._spec[v]:
                    out.append(Redistribution(op, k, v, self._spec[v], s))
        return out

    def check(self) -> None:
        """Raise ``TransformError`` at the first op whose outcome is not what the rules give
        for its reads, or whose reads cannot be made from its inputs' specs."""
        prog, mesh = self.prog, self.mesh
        if mesh.shape in self._checked:
            return
        rules = OpRules.of(prog, mesh)
        for p, ps in zip(prog.fn.params, self.params, strict=True):
            why = check_spec(prog.shape(p), ps, mesh)
            if why is not None:
                raise TransformError(f"parameter %{p.name} cannot be placed {spec_str(ps)}: "
                                     f"{why}")
        for op, reads, out in zip(prog.ops, self.reads, self.outcomes, strict=True):
            if out is None:
                continue
            if not reads:
                if not is_constant_op(prog, op):
                    raise TransformError(f"`{prog.op_text(op)}` has no reads but is not "
                                         "constant")
                continue
            for v, s in zip(op.inputs, reads, strict=True):
                if v is None or s is None:
                    continue
                src = self._spec[v]
                why = check_spec(prog.shape(v), s, mesh)
                if why is None and any(isinstance(b, Partial) and not isinstance(a, Partial)
                                       for a, b in zip(src, s, strict=True)):
                    why = "a partial read of a value that is not partial"
                if why is not None:
                    raise TransformError(f"`{prog.op_text(op)}` reads {prog.value_text(v)} as "
                                         f"{spec_str(s)}: {why}")
            try:
                got = rules.apply(op, reads)
            except NotLocal as e:
                raise TransformError(f"`{prog.op_text(op)}` cannot run locally on "
                                     f"{', '.join(map(_s, reads))}: {e.message}") from None
            if got != out:
                raise TransformError(f"`{prog.op_text(op)}` gives {_outs(got)}, the "
                                     f"assignment says {_outs(out)}")
        self._checked.add(mesh.shape)

    def dumps(self) -> str:
        """The sequential program with each value's placement, a comment per line; a read
        that redistributes is written ``%v: (P) -> (R)`` before its op."""
        prog = self.prog
        lines = [f"// mesh {self.mesh} devices {list(self.mesh.devices)}",
                 f"func @{prog.fn.name}("]
        for p, ps in zip(prog.fn.params, self.params, strict=True):
            lines.append(f"    %{p.name}: {spec_str(ps)}")
        lines.append(") {")
        for op, reads, out in zip(prog.ops, self.reads, self.outcomes, strict=True):
            if out is None:
                continue
            if reads:
                for v, s in zip(op.inputs, reads, strict=True):
                    if v is not None and s is not None and s != self._spec[v]:
                        lines.append(f"  // %{v.name}: {spec_str(self._spec[v])} -> "
                                     f"{spec_str(s)}")
            tag = "const" if not reads else ", ".join(spec_str(s) for s in out.outs)
            lines.append(f"  {prog.op_text(op)}  // {tag}")
        rets = ", ".join(f"%{v.name}" for v in prog.fn.returns)
        lines.append(f"  return {rets}")
        lines.append("}")
        return "\n".join(lines) + "\n"


def _s(s: Spec | None) -> str:
    return "_" if s is None else spec_str(s)


def _outs(out: Outcome) -> str:
    return ", ".join(spec_str(s) for s in out.outs)
