"""Repeated layers written once per form, the others placeholders (``lower_pipeline``'s
speed).

Inside a unit written op by op (``_Pipe.run``) with stage functions, the ops of each
repeated layer whole on the unit's stage (``_Pipe.whole``) are a *segment*. A segment
written op by op is recorded as a template (``LayerCopies.record``): the ops written (its
layer's ops, their redistributions, and at its end the pieces it added to their running
sums, ``_release``), and a *rule* for each value those ops read from outside, each piece
(``pieces``), base spec, running sum and memo entry (``_Pipe.memo``) the segment leaves,
that names values by their position in the layer (its ``n``-th distinct value of the
sequential ops) rather than by the values themselves: a result of the segment; the piece
of the layer's ``n``-th value on a stage, in a spec, at a virtual rank, as the segment
starts; a running sum as it starts; or a shared value (a constant, a copy shared by the
layers). A result's name is the name hint of a value of the layer and the end
``StageValues.name`` gives it (``_mb{m}_d{d}``). Pieces of values that no op outside the
layer reads are not left (no op reads them again).

Where two segments of one *form* (``_form``: its ops' types, attributes, specs and
prepared facts, its values' sharing, specs and readers; of the values from outside, their
types, producers and known constants by value) written in a unit have equal templates,
the unit's next segments of that form are copies of the last: where every value the
template reads from outside is there, and those its ops read are distinct (so that the
copy's ops have the template's form), the copy is one placeholder op
(``outline.Copied``, ``layer=True``) whose results are the values it leaves, with the
pieces, running sums and memo entries that writing it op by op would leave; ``outline``
makes it a call of the template's layer function, as it would the segment written out
and outlined (``replay`` does the same with whole units). Else the segment is written op
by op. A segment that reads a vocabulary-parallel or aligned lookup or runs an early
update (``_early_updates``) is neither recorded nor copied, and a template that makes a
constant, a sum over the microbatches (``_summed``) or a collapsed value is dropped.
Only the units ``replay`` does not record (whose template would hold the placeholders)
copy layers, and only forms that at least ``MIN_RUN`` of a unit's segments have. The tests
compare the printed programs with those written op by op.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any

from distir.ir.core import Op, Value
from distir.transforms.spmd.outline import COPIED, Copied
from distir.transforms.spmd.stage_values import name_hint

__all__ = ["LayerCopies", "MIN_RUN"]

MIN_RUN = 32
"""The fewest segments of one form in a unit for which they are recorded and copied:
recording a template costs about as much as writing two layers op by op and a
placeholder saves less than one, so that units of 24 GPT-2 layers (``gpt2-1.6b-train``
on one stage) were built slower, of 48 (``gpt2-175b`` on two) faster (``docs/spmd.md``).
Which segments are copied never changes the program."""

_SUFFIX = re.compile(r"(.*?)((?:_mb\d+)?_d\d+)")
"""A result's name: a name hint, then the end ``StageValues.name`` gives it."""


@dataclass(frozen=True, slots=True)
class _V:
    """The value of index ``n`` of a segment (``>= 0``: made in it, else ``~n``-th read
    from outside), where a memo key or entry holds it (or its ``id``)."""

    n: int


@dataclass(frozen=True, slots=True)
class _O:
    """The ``t``-th sequential op of a segment's layer, where a memo key names it."""

    t: int


@dataclass(eq=False, slots=True)
class _Template:
    key: tuple
    """What two equal templates share: the form, the ops written, and every rule."""
    start: int
    """The segment's first op in the program (its layer run's)."""
    values: list[Value]
    """The values its ops make, by value index."""
    names: list[tuple[int | None, str]]
    """Each of ``values``' name rule (``(n, end)``: the layer's ``n``-th value's hint and
    ``end``; ``(None, name)``: the name itself)."""
    index_of: dict[Value, int]
    """The value index of each value it makes or reads from outside (``~n``)."""
    read: list[int]
    """The positions in ``external`` of the values its ops read."""
    n_ext: int
    """How many values the segment reads from outside (by rule, each once)."""
    gets: list[tuple[int, int, Any, tuple[tuple[int, int], ...]]]
    """The pieces it reads from outside: ``(n, stage, spec, ((rank, ~index), ...))``."""
    others: list[tuple[int, tuple]]
    """The running sums and shared values it reads from outside: ``(~index, rule)``."""
    leaves: list[tuple[int, int, Any, tuple[tuple[int, int], ...]]]
    """The pieces it leaves: ``(n, stage, spec, ((rank, value index), ...))``."""
    bases: list[tuple[int, int, Any]]
    counts: list[tuple[int, int, int]]
    sums: list[tuple[int, int, Any, int]]
    memo: list[tuple[Any, Any]]
    plain: list[tuple[bool, bool]]
    """Per entry of ``memo``: whether its key, its value hold no value of the segment nor
    op of its layer nor list (``_plain``): a copy leaves them as they are."""


class _Snapshot:
    """The state a segment starts from, of its layer's values (by value index)."""

    def __init__(self, pipe: Any, keys: list[tuple[int, tuple[Value, int]]]) -> None:
        pieces, running, base = pipe.pieces, pipe.running, pipe.base
        self.lists: dict[tuple[int, int], dict[Any, list]] = {
            (n, key[1]): {spec: lst.copy() for spec, lst in got.items()}
            for n, key in keys if (got := pieces.get(key))}
        self.running = {(n, key[1]): dict(run) for n, key in keys
                        if (run := running.get(key)) is not None}
        self.base = {(n, key[1]): base.get(key) for n, key in keys}
        self.sizes = (len(pipe.memo), len(pipe.consts), len(pipe.sums), len(pipe.collapsed))


class LayerCopies:
    """The layer templates of a ``_Pipe``'s units (see the module docstring)."""

    def __init__(self, pipe: Any) -> None:
        self.pipe = pipe
        self.forms: dict[tuple[int, ...], Any] = {}
        self.worthy: dict[tuple[str, int], set[tuple[int, ...]]] = {}
        self.seen: list[_Template] = []
        """The template of the last segment of each form recorded in this unit."""
        self.ready: list[_Template] = []
        """The template that the unit's next segments of each form are copies of, once
        two of that form agree."""

    def unit(self) -> None:
        """Before a unit: no template yet."""
        self.seen, self.ready = [], []

    def worth(self, kind: str, s: int, segments: list[tuple[int | None, tuple[int, ...]]],
              ) -> set[tuple[int, ...]]:
        """The segments of unit ``(kind, s)`` (``segments``: its ops by layer) to record
        and copy: those of a layer whole on the stage of which at least ``MIN_RUN`` have
        the same sequential ops (types, attributes, wiring; fewer copies do not repay the
        templates). Made once, from the sequential ops alone: ``_Pipe._prepared`` is
        asked for an op's facts in the order the ops are written (``_Pipe._fresh``)."""
        got = self.worthy.get((kind, s))
        if got is None:
            whole = [seg for layer, seg in segments if layer in self.pipe.whole]
            got = set()
            if len(whole) >= MIN_RUN:
                ops = self.pipe.prog.ops
                by_shape: dict[tuple, list[tuple[int, ...]]] = {}
                for seg in whole:
                    first: dict[Value, int] = {}
                    shape = tuple((ops[i].op_type, ops[i].attrs_key, tuple(
                        None if v is None else first.setdefault(v, len(first))
                        for v in ops[i].inputs + ops[i].outputs)) for i in seg)
                    by_shape.setdefault(shape, []).append(seg)
                got = {seg for segs in by_shape.values() if len(segs) >= MIN_RUN
                       for seg in segs}
            self.worthy[(kind, s)] = got
        return got

    def _form(self, seg: tuple[int, ...]):  # type: ignore[no-untyped-def]
        """The form of the layer of ``seg`` (its sequential ops), its distinct values and
        the ``pieces`` keys of each (on the stages that can hold it); ``None`` where its
        ops are not to be copied. Made once."""
        if seg in self.forms:
            return self.forms[seg]
        pipe = self.pipe
        prog = pipe.prog
        first: dict[Value, int] = {}
        vals: list[Value] = []
        rows: list[tuple] = []
        out: Any = None
        s = pipe.stage[seg[0]]
        for i in seg:
            pre = pipe._prepared(i)
            if pre.vocab or pre.aligned or pre.s != s:
                break
            op = pre.op
            idx: list[int | None] = []
            for v in op.inputs + op.outputs:
                if v is None:
                    idx.append(None)
                    continue
                n = first.get(v)
                if n is None:
                    n = first[v] = len(vals)
                    vals.append(v)
                idx.append(n)
            rows.append((op.op_type, op.attrs_key, len(op.inputs), pre.reads, pre.outs,
                         pre.per_mb, pre.once, pre.scaled, pre.kinds, pre.summed, tuple(idx)))
        else:
            returned, here = set(prog.fn.returns), set(seg)
            producer, param_set, home, stage = prog.producer, prog.param_set, pipe.home, \
                pipe.stage
            facts = []
            keys: list[tuple[int, tuple[Value, int]]] = []
            inside: list[bool] = []  # read in the layer alone: its pieces, never again
            for n, v in enumerate(vals):
                j = producer.get(v)
                readers = pipe.readers.get(v, ())
                alone = all(x in here for x, _ in readers)
                param = v in param_set
                fact: tuple = (pipe.spec(v, s) if param or v in home else None,
                               pipe._reads_of(v, False), v in returned, alone)
                if j not in here:  # from outside the layer (a made value's type follows
                    known = None  # from its op's and inputs')
                    if j is not None and not pipe._reads(j):
                        c = prog.const(v)
                        known = None if c is None else (c.dtype.str, c.shape, c.tobytes())
                    fact += (prog.type(v), home.get(v), param, None if j is None else (
                        stage.get(j), pipe.per_mb(j), pipe.layer_of.get(j) in pipe.whole,
                        j in pipe.index_only), known)
                facts.append(fact)
                keys.extend((n, (v, x)) for x in sorted(
                    {home.get(v, 0)} | {stage[i] for i, _ in readers}))
                inside.append(alone and v not in returned)
            form = (s, tuple(rows), tuple(facts))
            out = (form, vals, keys, inside)
        self.forms[seg] = out
        return out

    def ranks(self, m: int) -> Sequence[int]:
        """The virtual ranks whose pieces a segment of microbatch ``m`` can read or leave:
        its own (every one for the last microbatch, which serves the readers after the
        microbatches) and microbatch 0's (memoized copies shared by the microbatches)."""
        pipe = self.pipe
        if m == pipe.k - 1:
            return pipe.all
        return pipe.ranks_of[m] if m == 0 else pipe.ranks_of[m] + pipe.ranks_of[0]

    def start(self, seg: tuple[int, ...]) -> _Snapshot | None:
        """Before writing ``seg`` op by op: its snapshot, or ``None`` if it is not to be
        recorded."""
        got = self._form(seg)
        if got is None:
            return None
        assert not self.pipe.held
        return _Snapshot(self.pipe, got[2])

    def record(self, seg: tuple[int, ...], m: int, snap: _Snapshot, start: int) -> None:
        """After writing ``seg`` op by op from op ``start`` (its pieces released): its
        template; the unit's next segments of its form are copies of it where it equals
        the one of that form before."""
        t = self._template(seg, m, snap, start)
        if t is None:
            return
        form = t.key[0]
        for n, prev in enumerate(self.seen):
            if prev.key[0] == form:
                self.seen[n] = t
                if t.key == prev.key:
                    self.ready = [x for x in self.ready if x.key[0] != form] + [t]
                break
        else:
            self.seen.append(t)

    def _template(self, seg: tuple[int, ...], m: int, snap: _Snapshot,
                  start: int) -> _Template | None:
        pipe = self.pipe
        if snap.sizes[1:] != (len(pipe.consts), len(pipe.sums), len(pipe.collapsed)):
            return None
        form, vals, keys, inside = self._form(seg)
        ops = pipe.b.ops[start:]
        ranks = self.ranks(m)
        made: dict[Value, int] = {}
        for op in ops:
            for o in op.outputs:
                made[o] = len(made)
        left: list[tuple] = []  # the pieces it leaves of the values read after it: (n, stage, spec,
        pieces = pipe.pieces  # rank, value)
        for n, key in keys:
            cache = pieces.get(key)
            if not cache or inside[n]:
                continue
            old = snap.lists.get((n, key[1]), {})
            for spec, lst in cache.items():
                was = old.get(spec)
                if was is not None and was == lst:  # (by identity)
                    continue
                left.extend((n, key[1], spec, r, y) for r in ranks
                            if (y := lst[r]) is not None and (was is None or was[r] is not y))
        now_running = {(n, key[1]): run for n, key in keys
                       if (run := pipe.running.get(key)) is not None}
        outside_read = {v for op in ops for v in op.inputs if v is not None}
        need = {v for v in outside_read if v not in made}
        need.update(e[4] for e in left if e[4] not in made)
        need.update(x for run in now_running.values() for x in run.values()
                    if isinstance(x, Value) and x not in made)
        found: dict[Value, tuple] = {}
        for (n, s), specs in snap.lists.items():
            for spec, lst in specs.items():
                for r in ranks:
                    y = lst[r]
                    if y is not None and y in need and y not in found:
                        found[y] = ("piece", n, s, spec, r)
        for (n, s), run in snap.running.items():
            for j, x in run.items():
                if j != "m" and x in need and x not in found:
                    found[x] = ("run", n, s, j)
        external: dict[tuple, int] = {}
        ids: dict[int, int] = {id(v): x for v, x in made.items()}

        def index(x: Value) -> int:
            got = made.get(x)
            if got is not None:
                return got
            rule = found.get(x, ("same", x))
            n = external.setdefault(rule, len(external))
            ids[id(x)] = ~n
            return ~n

        hints: dict[str, int | None] = {}
        for n, v in enumerate(vals):
            h = name_hint(v)
            hints[h] = n if h not in hints else None  # ambiguous: named as is
        code = []
        names: list[tuple[int | None, str]] = []
        for op in ops:
            ins = tuple(None if v is None else index(v) for v in op.inputs)
            for o in op.outputs:
                nm = o.name or ""
                mt = _SUFFIX.fullmatch(nm)
                n = None if mt is None else hints.get(mt[1])
                names.append((None, nm) if n is None else (n, mt[2]))  # type: ignore[index]
            code.append((op.op_type, op.attrs_key, ins))
        read = list(dict.fromkeys(~x for c in code for x in c[2] if x is not None and x < 0))
        leaves = [(n, s, spec, r, index(y)) for n, s, spec, r, y in left]
        base = pipe.base
        bases = [(n, key[1], b) for n, key in keys
                 if snap.base.get((n, key[1])) != (b := base.get(key))]
        counts: list[tuple[int, int, int]] = []
        sums: list[tuple[int, int, Any, int]] = []
        for (n, s), run in now_running.items():
            old = snap.running.get((n, s), {})
            if run.get("m") != old.get("m"):
                counts.append((n, s, run["m"]))
            sums.extend((n, s, j, index(x)) for j, x in run.items()
                        if j != "m" and old.get(j) is not x)
        where = {i: t for t, i in enumerate(seg)}
        memo = []
        new = len(pipe.memo) - snap.sizes[0]
        for key, val in reversed(list(islice(reversed(pipe.memo.items()), new))):
            if isinstance(key[0], int):
                t = where.get(key[0])
                if t is None:
                    return None
                key = (_O(t),) + key[1:]
            memo.append((_encode(key, ids), _encode_value(val, ids)))
        ext = list(external)
        index_of = {v: x for v, x in made.items()}
        for v in outside_read:
            if v not in made:
                index_of[v] = ~external[found.get(v, ("same", v))]
        gets: dict[tuple, list[tuple[int, int]]] = {}
        others = []
        for n, rule in enumerate(ext):
            if rule[0] == "piece":
                gets.setdefault(rule[1:4], []).append((rule[4], n))
            else:
                others.append((n, rule))
        puts: dict[tuple, list[tuple[int, int]]] = {}
        for n, s, spec, r, x in leaves:
            puts.setdefault((n, s, spec), []).append((r, x))
        return _Template((form, tuple(code), tuple(names), tuple(ext), tuple(leaves),
                          tuple(bases), tuple(counts), tuple(sums), tuple(memo)), start,
                         list(made), names, index_of, read, len(ext),
                         [k + (tuple(v),) for k, v in gets.items()], others,
                         [k + (tuple(v),) for k, v in puts.items()], bases, counts, sums, memo,
                         [(_plain(k), _plain(v)) for k, v in memo])

    def copy(self, seg: tuple[int, ...]) -> bool:
        """Write ``seg`` as a copy of the unit's template of its form, if it has one, every
        value the template reads from outside is there and those its ops read are distinct
        (as the template's: the copy then has its form): a placeholder op (``Copied``)
        whose results are the values it leaves, which ``outline`` makes a call of the
        template's layer function. Else nothing."""
        got = self._form(seg)
        if got is None:
            return False
        form = got[0]
        t = next((x for x in self.ready if x.key[0] == form), None)
        if t is None:
            return False
        pipe = self.pipe
        vals = got[1]
        pieces, running, size = pipe.pieces, pipe.running, pipe.vmesh.size
        ext: list[Any] = [None] * t.n_ext
        for n, s, spec, at in t.gets:
            cache = pieces.get((vals[n], s))
            lst = None if cache is None else cache.get(spec)
            if lst is None:
                return False
            for r, x in at:
                ext[x] = lst[r]
        for x, rule in t.others:
            ext[x] = rule[1] if rule[0] == "same" else running.get(
                (vals[rule[1]], rule[2]), {}).get(rule[3])
        if None in ext:
            return False
        read = [ext[x] for x in t.read]
        if len(set(map(id, read))) != len(read):
            return False
        hints = [name_hint(v) for v in vals]
        names = t.names
        made: dict[int, Value] = {}

        def value(x: int) -> Value:
            if x < 0:
                return ext[~x]  # type: ignore[no-any-return]
            y = made.get(x)
            if y is None:
                n, e = names[x]
                y = made[x] = Value(e if n is None else hints[n] + e)
            return y

        for n, s, spec, at in t.leaves:
            key = (vals[n], s)
            cache = pieces.get(key)
            if cache is None:
                cache = pieces[key] = {}
            lst = cache.get(spec)
            if lst is None:
                lst = cache[spec] = [None] * size
            for r, x in at:
                lst[r] = value(x)  # type: ignore[call-overload]
        base = pipe.base
        for n, s, spec in t.bases:
            base[(vals[n], s)] = spec
        for n, s, c in t.counts:
            running.setdefault((vals[n], s), {})["m"] = c
        for n, s, j, x in t.sums:
            running.setdefault((vals[n], s), {})[j] = value(x)
        memo = pipe.memo
        for (key, val), (plain_key, plain_val) in zip(t.memo, t.plain):
            memo[key if plain_key else _decode(key, seg, value, True)] = \
                val if plain_val else _decode(val, seg, value, False)
        op = Op(COPIED, read, None, tuple(made.values()))
        pipe.b.ops.append(op)
        pipe.copied[op] = Copied(t.start, len(t.key[1]), (), t.index_of,
                                 made, t.values, value, layer=True)
        return True


def _encode(x: Any, ids: dict[int, int]) -> Any:
    """A memo key with the ids of the segment's values as ``_V``."""
    if isinstance(x, tuple):
        return tuple(_encode(y, ids) for y in x)
    if isinstance(x, int) and not isinstance(x, bool):
        n = ids.get(x)
        return x if n is None else _V(n)
    return x


def _encode_value(x: Any, ids: dict[int, int]) -> Any:
    """A memo entry with the segment's values as ``_V``."""
    if isinstance(x, Value):
        n = ids.get(id(x))
        return x if n is None else _V(n)
    if isinstance(x, tuple | list):
        return type(x)(_encode_value(y, ids) for y in x)
    return x


def _plain(x: Any) -> bool:
    """Whether ``_decode`` gives ``x`` again, as an equal immutable object: nothing in it
    is a ``_V``, an ``_O`` or a list."""
    if isinstance(x, _V | _O | list):
        return False
    if isinstance(x, tuple):
        return all(map(_plain, x))
    return True


def _decode(x: Any, seg: tuple[int, ...], value: Any, as_id: bool) -> Any:
    if isinstance(x, _V):
        v = value(x.n)
        return id(v) if as_id else v
    if isinstance(x, _O):
        return seg[x.t]
    if isinstance(x, tuple | list):
        return type(x)(_decode(y, seg, value, as_id) for y in x)
    return x
