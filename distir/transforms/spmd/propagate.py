"""Forward propagation of placements: from seeds to a whole ``LayoutAssignment``.

``propagate(fn, mesh, seeds)`` places every parameter as seeded (a parameter left free is
placed as its first reader reads it: ``Replicate``, or what a rule demands), then walks the
live ops in program order. Each op first reads its inputs as their producers hold them (or
as a seed *pins* them: a seeded op result is read as seeded by every consumer). If the
rules refuse, the reads change, one mesh axis at a time, until the op runs locally; each
change is a redistribution that ``lower`` turns into communication:

1. a rule's demand (the bias of a column-parallel product is read split like it);
2. else the ``Partial`` reads of the refusing axis become ``Replicate`` (an all-reduce);
3. else every read of that axis becomes ``Replicate`` (all-gathers).

So propagation never fails on an op the rules know: the worst case runs it replicated.
"""

from __future__ import annotations

from collections.abc import Mapping

from distir.errors import ConfigError, TransformError
from distir.ir.core import Function, Module, Value
from distir.transforms.program import Program
from distir.transforms.spmd.assignment import LayoutAssignment, is_constant_op, is_shape_operand
from distir.transforms.spmd.mesh import (
    Mesh,
    Partial,
    Placement,
    R,
    Replicate,
    Shard,
    Spec,
    check_spec,
    replicated,
    spec_str,
)
from distir.transforms.spmd.rules import NotLocal, OpRules, Outcome

__all__ = ["propagate", "resolve_seeds", "program_of"]

Seeds = Mapping[Value | str, Spec | Placement]


def program_of(fn: Function | Module | Program) -> Program:
    """The call-free, typed view of ``fn`` that assignments refer to."""
    if isinstance(fn, Program):
        return fn
    if isinstance(fn, Module):
        fn = fn.entry
    return Program(fn)


def resolve_seeds(prog: Program, mesh: Mesh, seeds: Seeds) -> dict[Value, Spec]:
    """Seeds keyed by value; a string names a parameter (or a value) of ``prog``; a single
    placement stands for a 1-D mesh's spec. Checks that each spec fits its value."""
    by_name: dict[str, Value] = {}
    for p in prog.fn.params:
        by_name.setdefault(p.name or "", p)
    for op in prog.ops:
        for o in op.outputs:
            by_name.setdefault(o.name or "", o)
    out: dict[Value, Spec] = {}
    for k, spec in seeds.items():
        v = by_name.get(k) if isinstance(k, str) else k
        if v is None or v not in prog.env:
            raise ConfigError(f"seed {k!r} is not a value of @{prog.fn.name}: name a parameter "
                              "or a result of one of its ops")
        spec = (spec,) if isinstance(spec, Shard | Replicate | Partial) else tuple(spec)
        why = check_spec(prog.shape(v), spec, mesh)
        if why is not None:
            raise ConfigError(f"seed %{v.name} cannot be placed {spec_str(spec)}: {why}")
        out[v] = spec
    return out


def propagate(fn: Function | Module | Program, mesh: Mesh, seeds: Seeds | None = None,
              ) -> LayoutAssignment:
    """Every value's placement on ``mesh`` from the ``seeds`` (``{param or name: spec}``),
    by forward propagation through the layout rules. Never raises on an op the rules can
    run replicated; the result passes ``check``."""
    prog = program_of(fn)
    rules = OpRules.of(prog, mesh)
    pins = resolve_seeds(prog, mesh, seeds or {})
    rep = replicated(mesh)
    params = tuple(pins.get(p, rep) for p in prog.fn.params)
    avail: dict[Value, Spec] = dict(zip(prog.fn.params, params, strict=True))
    free = {p for p in prog.fn.params if p not in pins}
    reads: list[tuple[Spec | None, ...] | None] = [None] * len(prog.ops)
    outcomes: list[Outcome | None] = [None] * len(prog.ops)
    for i in prog.live_ops:
        op = prog.ops[i]
        if is_constant_op(prog, op):
            reads[i] = ()
            outcomes[i] = Outcome(tuple(rep for _ in op.outputs), tuple(() for _ in op.outputs))
            for o in op.outputs:
                avail[o] = pins.get(o, rep)
            continue
        first = tuple(None if v is None or is_shape_operand(op, k) else avail[v]
                      for k, v in enumerate(op.inputs))
        got, out = choose_reads(rules, i, first)
        for v, r in zip(op.inputs, got, strict=True):
            # a parameter the seeds leave free is loaded as its first reader reads it
            if v in free and r is not None and not any(isinstance(x, Partial) for x in r):
                avail[v] = r
            free.discard(v)  # type: ignore[arg-type]
        reads[i] = got
        outcomes[i] = out
        for o, s in zip(op.outputs, out.outs, strict=True):
            avail[o] = pins.get(o, s)
    params = tuple(avail[p] for p in prog.fn.params)
    return LayoutAssignment(prog, mesh, params, tuple(reads), tuple(outcomes))


def choose_reads(rules: OpRules, i: int, first: tuple[Spec | None, ...],
                 ) -> tuple[tuple[Spec | None, ...], Outcome]:
    """The reads of op ``i`` nearest to ``first`` that the rules accept, and their outcome
    (see the module docstring for the order of changes)."""
    prog, mesh = rules.prog, rules.mesh
    op = prog.ops[i]
    cur = list(first)
    for _ in range(4 * (len(cur) + 1) * mesh.ndim):
        try:
            return tuple(cur), rules.apply(op, tuple(cur))
        except NotLocal as e:
            a = e.axis
            if e.demand is not None:
                k, a, want = e.demand
                s = cur[k]
                if s is not None and s[a] != want and check_spec(
                        prog.shape(op.inputs[k]), _set(s, a, want), mesh) is None:  # type: ignore[arg-type]
                    cur[k] = _set(s, a, want)
                    continue
            axes = range(mesh.ndim) if a is None else (a,)
            changed = False
            for ax in axes:
                for k, s in enumerate(cur):
                    if s is not None and isinstance(s[ax], Partial):
                        cur[k] = _set(s, ax, R)
                        changed = True
            if changed:
                continue
            for ax in axes:
                for k, s in enumerate(cur):
                    if s is not None and s[ax] != R:
                        cur[k] = _set(s, ax, R)
                        changed = True
            if not changed:
                raise TransformError(f"`{prog.op_text(op)}` cannot run even with every input "
                                     f"replicated: {e.message}") from None
    raise TransformError(f"`{prog.op_text(op)}`: no placement of its inputs found")


def _set(s: Spec, axis: int, p: object) -> Spec:
    return s[:axis] + (p,) + s[axis + 1:]  # type: ignore[return-value]
