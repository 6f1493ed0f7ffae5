"""Outlining: repeated runs of ops become calls of one function.

``outline(fn, runs, inner=())`` takes a flat program and contiguous op ranges (``runs``: the
schedule's units, one per stage, phase and microbatch, see ``pipeline``) and replaces every
range whose ops equal another's up to the values they read from outside it (the
*externals*, numbered in order of first use) by a call of one function written once: its
parameters are the externals, untyped (one function serves every microbatch), its
results the values of the range that any of its copies hands to later ops. The result is
the same computation (the reference executor and the simulator treat a call as its
inlined ops), so a pipeline with ``K`` microbatches writes each stage's work about once
instead of ``K`` times, as ``dtp``'s stage functions do.

Runs may nest one level (``inner``: each unit's layers, see ``pipeline``): the inner runs
are outlined first, so equal layers become calls of one *layer function* inside the stage
functions and inside the units left written out, as ``dtp``'s layer functions.

Two ranges are equal when their ops agree one by one in type, attributes, callee, number of
results and wiring (each input the same earlier result of the range, or the same
external); names do not matter. A range with no equal is left as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from distir.ir.core import CALL, Function, Op, Value

__all__ = ["outline", "Copied", "COPIED"]

COPIED = "copied"
"""The type of a ``Copied`` placeholder op (never left in a program ``outline`` returns)."""


@dataclass(eq=False, slots=True)
class Copied:
    """A run that is a copy of an earlier run of the program (its *template*: its ops
    again, reading other values from outside, in the same form), written as one
    placeholder op of type ``COPIED``: its inputs are the values the copy reads from
    outside (distinct, as the template's), its results those of its values that later
    ops may read. ``outline`` makes it a call of the template's function, as it would
    the copy written out; the copy's inner runs are the template's. (``pipeline``'s
    middle microbatches, see ``replay``.)"""

    start: int
    """The template's first op in the program given to ``outline``."""
    size: int
    """The template's number of ops."""
    inner: tuple[tuple[int, int], ...]
    """The template's inner runs ``(start, end)``, offsets from ``start``."""
    index_of: Mapping[Value, int]
    """An index for each value the template reads from outside or makes."""
    made: Mapping[int, Value]
    """The copy's values made so far (those later ops may read), by index."""
    values: Sequence[Value]
    """The template's value of each index ``>= 0`` (those it makes)."""
    value: Callable[[int], Value]
    """The copy's value of an index (made when first asked for)."""
    layer: bool = False
    """Whether the copy is of an inner run (a layer, ``layer_copy``; ``inner`` empty): it
    is a member of its template's class among the inner runs, made a call there."""

    def of(self, v: Value) -> Value:
        """The copy's value for the template's value ``v``."""
        return self.value(self.index_of[v])


Run = tuple[str, int, int]
"""``(label, start, end)``: the ops ``start .. end-1`` of the program; the label names the
function (``stage1_bwd``)."""


def _shape(ops: list[Op], start: int, end: int,
           used_after: Mapping[Value | None, int] | None = None,
           ) -> tuple[tuple, list[Value], list[tuple[int, int]]]:
    """The canonical form of ``ops[start:end]``, its externals and (given ``used_after``,
    the last op reading each value) the ``(op offset, result)`` of its values read after
    it."""
    where: dict[Value, tuple[int, ...]] = {}
    ext: dict[Value, int] = {}
    form = []
    after: list[tuple[int, int]] = []
    get = where.get
    last = (used_after or {}).get
    for off, op in enumerate(ops[start:end]):
        ins = op.inputs
        refs = [get(v) for v in ins]  # type: ignore[arg-type]
        if None in refs:  # an omitted input, or a value from outside: an external
            for q, ref in enumerate(refs):
                if ref is None:
                    v = ins[q]
                    if v is None:
                        refs[q] = ()
                    else:
                        refs[q] = where[v] = (ext.setdefault(v, len(ext)),)
        outs = op.outputs
        form.append((op.op_type, op.attrs_key, op.callee, len(outs), tuple(refs)))
        for k, o in enumerate(outs):
            where[o] = pos = (off, k)
            if last(o, -1) >= end:
                after.append(pos)
    return tuple(form), list(ext), after


Virtual = tuple[int, Copied, int, int, tuple[int, int] | None]
"""A run of a ``Copied`` placeholder: ``(placeholder index, copy, template run start,
end, the template's whole run)``, the last ``None`` where the run is the whole copy (which
then becomes a call)."""


def outline(fn: Function, runs: Sequence[Run], inner: Sequence[Run] = (),
            copied: Mapping[Op, Copied] | None = None) -> Function:
    """``fn`` with the equal ``runs`` (two or more of one form) replaced by calls; the
    runs must not overlap. ``inner`` are runs nested in ``runs`` (a unit's layers), each
    inside one run or outside all: they are outlined first, so that equal layers are calls
    of one layer function inside the stage functions and inside the units that stay
    written out. ``copied``: the placeholder ops of ``fn`` (``Copied``), each a member of
    its template's classes, made a call of the template's function. Returns a new
    function; ``fn`` is not changed."""
    copied = copied or {}
    where = [(j, copied[op]) for j, op in enumerate(fn.ops) if op in copied] if copied else []
    virtual: list[Virtual] = [(j, cp, cp.start + a, cp.start + e,
                               (cp.start, cp.start + cp.size))
                              for j, cp in where for a, e in cp.inner]
    virtual.extend((j, cp, cp.start, cp.start + cp.size, None) for j, cp in where if cp.layer)
    read_after: dict[Copied, tuple[Value, ...]] = {}  # the same in both passes
    ops, at = _replace(fn.ops, fn.returns, inner, virtual, False, read_after)
    if inner:
        runs = [(label, at[start], at[end]) for label, start, end in runs]
    whole: list[Virtual] = [(at[j], cp, at[cp.start], at[cp.start + cp.size], None)
                            for j, cp in where if not cp.layer]
    ops, _ = _replace(ops, fn.returns, runs, whole, True, read_after)
    if ops is fn.ops:
        return fn
    assert all(op.op_type != COPIED for op in ops), "a copied run was not outlined"
    new = Function(fn.name, fn.params, ops, fn.returns, fn.return_types)
    new.initializers = dict(fn.initializers)
    return new


def _replace(ops: list[Op], returns: Sequence[Value], runs: Sequence[Run],
             virtual: Sequence[Virtual] = (), emit: bool = False,
             read_after: dict[Copied, tuple[Value, ...]] | None = None,
             ) -> tuple[list[Op], list[int]]:
    """``ops`` with the equal ``runs`` replaced by calls, and the new index of each old
    index that starts a run or lies outside all (``len(ops)`` included); ``ops`` itself
    when nothing is replaced. The ``virtual`` runs (copies' runs, not written out) count
    as members of their template run's class; with ``emit`` their placeholders become
    calls. ``read_after``: (the template's values of) each copy's values that ops after
    it read, filled where missing (the same before and after inner runs become calls)."""
    used_after: dict[Value | None, int] = {  # the last op index reading each value
        v: j for j, op in enumerate(ops) for v in op.inputs}
    used_after.pop(None, None)  # an omitted input
    for v in returns:
        used_after[v] = len(ops)
    classes: dict[tuple, list[tuple[str, int, int, list[Value], list[tuple[int, int]]]]] = {}
    shaped: dict[tuple[int, int], tuple[tuple, str, list[Value]]] = {}
    for label, start, end in runs:
        if end - start < 2:
            continue
        form, ext, after = _shape(ops, start, end, used_after)
        classes.setdefault(form, []).append((label, start, end, ext, after))
        shaped[(start, end)] = (form, label, ext)
    read_in: dict[tuple[int, int], dict[Value, int]] = {}  # per template: last read in it
    positions: dict[tuple[int, int], dict[Value, tuple[int, int]]] = {}  # per template run
    later: dict[tuple[int, int], list[tuple[int, int]]] = {}  # per template run: its values
    # that its template unit reads after it (a copy's do too)
    read_after = {} if read_after is None else read_after
    by_run: dict[tuple[int, int], list[tuple[str, int, Copied, int, int, list[Value]]]] = {}
    # the copies of each template run
    calls: dict[int, tuple[int, list[Op]]] = {}  # start -> (end, its ops: a call)
    for j, cp, t0, t1, whole in virtual:
        got = shaped.get((t0, t1))
        if got is None:  # too short to outline (a layer's call): its ops again
            if emit or cp.layer:
                value, index_of = cp.value, cp.index_of  # ``cp.of``
                calls[j] = (j + 1, [Op(op.op_type, [None if v is None else value(index_of[v])
                                                    for v in op.inputs], op.attrs or None,
                                       [value(index_of[o]) for o in op.outputs],
                                       callee=op.callee)
                                    for op in ops[t0:t1]])
            continue
        _, label, text = got
        if (t0, t1) not in positions:
            pos = positions[(t0, t1)] = {o: (x - t0, k) for x in range(t0, t1)
                                         for k, o in enumerate(ops[x].outputs)}
            last: dict[Value, int] = {}
            if whole is not None:
                last = read_in.get(whole)  # type: ignore[assignment]
                if last is None:
                    last = read_in[whole] = {v: x for x in range(*whole)
                                             for v in ops[x].inputs if v is not None}
            later[(t0, t1)] = [p for o, p in pos.items() if last.get(o, -1) >= t1]
        if cp not in read_after:
            read_after[cp] = tuple(cp.values[x] for x, y in cp.made.items()
                                   if used_after.get(y, -1) > j)
        by_run.setdefault((t0, t1), []).append((label, j, cp, t0, t1, text))
    count: dict[str, int] = {}
    for members in classes.values():
        virt = [c for m in members for c in by_run.get((m[1], m[2]), ())]
        if len(members) + len(virt) < 2:
            continue
        label, t0, t1, text, _ = members[0]
        # the results any copy hands on: (op offset, result index)
        keep: set[tuple[int, int]] = set()
        for m in members:
            keep.update(m[4])
        for start, end in {(v[3], v[4]) for v in virt}:  # their template runs
            keep.update(later[(start, end)])
        for start, end, later_read in {(v[3], v[4], read_after[v[2]]) for v in virt}:
            pos = positions[(start, end)]
            keep.update(pos[o] for o in later_read if o in pos)
        kept = sorted(keep)
        labels = sorted({m[0] for m in members} | {m[0] for m in virt})
        if len(labels) > 1:  # one function for several stages' runs: stage0_1_fwd
            heads = [x.rsplit("_", 1) for x in labels]
            if all(len(h) == 2 and h[1] == heads[0][1] for h in heads):
                label = "_".join([heads[0][0]] + [h[0].lstrip("stage") for h in heads[1:]]
                                 + [heads[0][1]])
        n = count[label] = count.get(label, 0) + 1
        callee = _function(f"{label}_{n}" if n > 1 else label, ops[t0:t1], text, kept)
        for _, start, end, ext, _ in members:
            outs = [ops[start + j].outputs[k] for j, k in kept]
            calls[start] = (end, [Op(CALL, ext, None, outs, callee=callee)])
        if emit or virt:
            where: dict[int, tuple[list[int], list[int]]] = {}  # per template run: the
            # indices of its externals and of its results kept
            for _, here, cp, start, _, ext in virt:
                if not (emit or cp.layer):
                    continue
                got_at = where.get(start)
                if got_at is None:
                    got_at = where[start] = (
                        [cp.index_of[v] for v in ext],
                        [cp.index_of[ops[start + j].outputs[k]] for j, k in kept])
                value = cp.value
                calls[here] = (here + 1, [Op(CALL, [value(x) for x in got_at[0]], None,
                                             [value(x) for x in got_at[1]], callee=callee)])
    if not calls:
        return ops, list(range(len(ops) + 1))
    out: list[Op] = []
    at = [0] * (len(ops) + 1)
    j = 0
    while j < len(ops):
        at[j] = len(out)
        call = calls.get(j)
        if call is not None:
            out.extend(call[1])
            j = call[0]
        else:
            out.append(ops[j])
            j += 1
    at[len(ops)] = len(out)
    return out, at


def _function(name: str, body: list[Op], ext: list[Value], keep: list[tuple[int, int]],
              ) -> Function:
    """The function of one run: parameters for its externals (untyped), its ops copied,
    the ``keep`` results returned."""
    env: dict[Value, Value] = {v: Value(v.name) for v in ext}
    params = [env[v] for v in ext]
    ops = []
    for op in body:
        outs = [Value(o.name) for o in op.outputs]
        ops.append(Op(op.op_type, [None if v is None else env[v] for v in op.inputs],
                      dict(op.attrs) or None, outs, callee=op.callee))
        env.update(zip(op.outputs, outs, strict=True))
    rets = [ops[j].outputs[k] for j, k in keep]
    return Function(name, params, ops, rets)
