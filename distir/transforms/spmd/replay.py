"""Units written once, copied for the other microbatches (``lower_pipeline``'s speed).

A stage's unit ``(phase, s, m)`` of a middle microbatch (neither the first, which makes the
constants and starts the gradients' running sums, nor the last, which completes them) is
as a rule the unit of microbatch 1 with other values. ``Replay`` records the *template* of
the units of microbatches 1 and 2, both written op by op (``_Pipe._op``): the ops, and for
each input, each piece the unit leaves in ``pieces`` and each running sum it leaves a
*rule* that names the value without naming the microbatch (a result of the unit; the
piece of ``pieces[key][spec]`` at the ``index``-th rank of the microbatch, as the unit
starts; a running sum as the unit starts; a shared value: a weight, a constant, a
batch-independent copy). Where the two templates are equal, the units of microbatches
``3 .. K-2`` are copies of it (several times cheaper than writing them op by op); where
they differ, those units are written op by op. The copies leave the pieces and running
sums the template leaves, so the ops written after them (sends, later units, the updates)
are the same as well; the tests compare the printed programs. With stage functions a copy
whose form is its template's is not written out at all but left as one placeholder op
(``outline.Copied``), which ``outline`` makes a call of the template's function.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from distir.ir.core import Op, Value
from distir.transforms.spmd.outline import COPIED, Copied

__all__ = ["Replay"]

Rule = tuple
"""``(op offset, result)`` of the unit; ``("piece", key, spec, index)``; ``("run", key,
j)``; ``("same", value)`` (see the module docstring)."""
Entry = tuple
"""``(key, spec, index)``: the piece at the ``index``-th rank of the microbatch."""


@dataclass(frozen=True, eq=False)
class _Template:
    ops: list[Op]
    sig: list[tuple]
    """Per op: its type, attributes, result count and its inputs' rules (``None`` for an
    omitted one)."""
    pieces: dict[Entry, Rule]
    running: dict[tuple[Any, Any], Rule]
    """The running sums ``(key, j)`` the unit leaves, and the keys whose count it moves."""
    counted: frozenset
    layers: list[tuple[str, int, int]]
    """The layer runs inside the unit, offsets from its start."""
    external: list[Rule]
    """The distinct rules of the values from outside the unit that its ops read (the
    first ``read``) or that it leaves as pieces or running sums."""
    read: int
    code: list[tuple[Op, tuple[int | None, ...], tuple[str | None, ...]]]
    """Per op, its inputs as indices (``n >= 0``: the ``n``-th result of the unit's ops,
    flattened; ``~n``: the ``n``-th of ``external``; ``None``: an omitted one) and its
    results' names."""
    leaves: list[tuple[Any, Any, tuple[tuple[int, int], ...]]]
    """``pieces`` as ``(key, spec, ((index, value index), ...))``, in order, of the
    values read after the unit alone (``Replay._read_after``)."""
    sums: list[tuple[Any, Any, int]]
    """``running`` as ``(key, j, value index)``."""
    start: int = 0
    """The unit's first op in the program."""
    index_of: dict[Value, int] | None = None
    """The value index of each value the unit reads from outside (the first ``read`` of
    ``external``, as ``~n``) or makes."""
    values: list[Value] | None = None
    """The values the unit makes, by value index."""
    left: tuple[int, ...] = ()
    """The value indices of the unit's values it leaves (``leaves``, ``sums``), each once,
    in order: those a copy makes first (``Replay._placeholder``)."""
    inner: tuple[tuple[int, int], ...] = ()
    """``layers``' ``(start, end)``: a copy's inner runs (``Copied.inner``)."""

    lists: list[Any] = field(default_factory=list)
    """Per rule of ``external``, then per entry of ``leaves``: the ``pieces`` dict of its
    key and the list of its spec found there last (a dict keeps a spec's list once
    made), or ``None``: a copy finds the list without hashing the spec again."""

    def same(self, other: _Template) -> bool:
        return (self.sig == other.sig and self.pieces == other.pieces
                and self.running == other.running and self.counted == other.counted
                and self.layers == other.layers)


class Replay:
    """Templates of the middle units of a ``_Pipe`` (see the module docstring)."""

    def __init__(self, pipe: Any, units: dict[tuple[str, int], list[int]]) -> None:
        self.pipe, self.units = pipe, units
        self.templates: dict[tuple[str, int], _Template | None] = {}
        self.before: dict[Entry, Value] = {}
        self.running: dict[tuple[Any, Any], Value] = {}
        self.counts: dict[Any, int] = {}
        self.keys: dict[tuple[str, int], list[tuple[Value, int]]] = {}
        """The ``pieces`` keys a unit can read or leave (``_pieces``), per stage and phase."""

    def recorded(self, m: int) -> bool:
        """Whether the units of microbatch ``m`` are recorded as templates."""
        return m in (1, 2) and self.pipe.k >= 5  # else no unit is copied

    def copies(self, kind: str, s: int, m: int) -> bool:
        """Whether unit ``(kind, s, m)`` is to be written as a copy (``write``)."""
        return 3 <= m <= self.pipe.k - 2 and self.templates.get((kind, s)) is not None

    def start(self, kind: str, s: int, m: int) -> None:
        """Before writing unit ``(kind, s, m)`` op by op: note the state it starts from."""
        if self.recorded(m):
            self.before = self._pieces(kind, s, m)
            self.running = {(key, j): x for key, run in self.pipe.running.items()
                            for j, x in run.items() if j != "m"}
            self.counts = {key: run.get("m") for key, run in self.pipe.running.items()}

    def written(self, kind: str, s: int, m: int, start: int, layers: int) -> None:
        """After writing unit ``(kind, s, m)`` op by op from op ``start`` (its layer runs
        from ``layers``): record its template; keep it if microbatches 1 and 2 agree."""
        if not self.recorded(m):
            return
        pipe = self.pipe
        t = self._template(kind, s, m, pipe.b.ops[start:], pipe.layer_runs[layers:], start)
        first = self.templates.get((kind, s))
        if m == 1:
            self.templates[(kind, s)] = t
        elif first is not None and not t.same(first):
            self.templates[(kind, s)] = None

    def _pieces(self, kind: str, s: int, m: int) -> dict[Entry, Value]:
        """The pieces at the ranks of microbatch ``m`` of the values the unit's ops read
        or make (the only ones it can read or leave), on every stage that can hold them
        (its producer's, its readers', stage 0 for a parameter)."""
        pipe = self.pipe
        ranks = list(enumerate(pipe.ranks_of[m]))
        keys = self.keys.get((kind, s))
        if keys is None:
            vals = {v for i in self.units[(kind, s)] for v in pipe.prog.ops[i].inputs
                    + pipe.prog.ops[i].outputs if v is not None}
            keys = self.keys[(kind, s)] = [(v, x) for v in vals for x in sorted(
                {pipe.home.get(v, 0)} | {pipe.stage[i] for i, _ in pipe.readers.get(v, ())})]
        out: dict[Entry, Value] = {}
        pieces = pipe.pieces
        for key in keys:
            got = pieces.get(key)
            if not got:  # most values are on one or two stages
                continue
            for spec, lst in got.items():
                for idx, r in ranks:
                    y = lst[r]
                    if y is not None:
                        out[(key, spec, idx)] = y
        return out

    def _template(self, kind: str, s: int, m: int, ops: list[Op], layers: list,
                  start: int) -> _Template:
        pipe = self.pipe
        made = {o: (j, q) for j, op in enumerate(ops) for q, o in enumerate(op.outputs)}
        started = {x: kj for kj, x in self.running.items()}
        left = [(e, x) for e, x in self._pieces(kind, s, m).items()
                if self.before.get(e) is not x]
        sums = [((key, j), x) for key, run in pipe.running.items() for j, x in run.items()
                if j != "m" and self.running.get((key, j)) is not x]
        outside = {v for op in ops for v in op.inputs if v is not None}
        outside.update(x for _, x in left)
        outside.update(x for _, x in sums)
        found: dict[Value, Rule] = {}  # the first piece of each value the rules name
        for e, x in self.before.items():
            if x in outside and x not in found:
                found[x] = ("piece",) + e

        def rule(x: Value) -> Rule:
            got = made.get(x)
            if got is not None:
                return got
            kj = started.get(x)
            return ("run",) + kj if kj is not None else found.get(x, ("same", x))

        sig = [(op.op_type, op.attrs_key, len(op.outputs),
                tuple(None if v is None else rule(v) for v in op.inputs)) for op in ops]
        pieces = {e: rule(x) for e, x in left}
        running = {kj: rule(x) for kj, x in sums}
        counted = frozenset(key for key, run in pipe.running.items()
                            if run.get("m") != self.counts.get(key))
        layers = [(lb, a - start, b - start) for lb, a, b in layers]
        if m != 1:  # compared with microbatch 1's, never copied
            return _Template(ops, sig, pieces, running, counted, layers, [], 0, [], [], [])
        flat: dict[tuple[int, int], int] = {}
        external: dict[Rule, int] = {}

        def index(r: Rule) -> int:
            return flat[r] if isinstance(r[0], int) else ~external.setdefault(r, len(external))

        code = []
        index_of: dict[Value, int] = {}
        for op, (_, _, n_out, rules) in zip(ops, sig, strict=True):
            ins = tuple(None if r is None else index(r) for r in rules)
            code.append((op, ins, tuple(o.name for o in op.outputs)))
            index_of.update((v, x) for v, x in zip(op.inputs, ins, strict=True)
                            if v is not None and x is not None and x < 0)
            for q in range(n_out):
                index_of[op.outputs[q]] = flat[(len(code) - 1, q)] = len(flat)
        read = len(external)
        leaves: dict[tuple, list[tuple[int, int]]] = {}
        needed = self._read_after(kind, s)
        for (key, spec, idx), r in pieces.items():  # grouped, in order of first leaving
            if key[0] in needed:
                leaves.setdefault((key, spec), []).append((idx, index(r)))
        sum_at = [(key, j, index(r)) for (key, j), r in running.items()]
        kept = [x for lst in leaves.values() for _, x in lst] + [x for _, _, x in sum_at]
        return _Template(ops, sig, pieces, running, counted, layers, list(external), read, code,
                         [(key, spec, tuple(x)) for (key, spec), x in leaves.items()],
                         sum_at, start, index_of, [o for op in ops for o in op.outputs],
                         tuple(dict.fromkeys(x for x in kept if x >= 0)),
                         tuple((a, e) for _, a, e in layers))

    def _read_after(self, kind: str, s: int) -> set[Value]:
        """The values of unit ``(kind, s)``'s ops (read or made) that an op outside the
        unit reads, or that the program returns: a copy leaves the pieces of these alone,
        the others being read by no op after it (each microbatch's unit reads its own
        values, its copies theirs through ``external``)."""
        pipe = self.pipe
        inside = set(self.units[(kind, s)])
        vals = {v for i in inside for v in pipe.prog.ops[i].inputs + pipe.prog.ops[i].outputs
                if v is not None}
        returned = set(pipe.prog.fn.returns)
        return {v for v in vals if v in returned
                or any(i not in inside for i, _ in pipe.readers.get(v, ()))}

    def _externals(self, t: _Template, m: int) -> list[Value | None]:
        """The value of each of ``t.external`` for microbatch ``m`` as its unit starts
        (see ``Rule``)."""
        pipe = self.pipe
        pieces, running, ranks = pipe.pieces, pipe.running, pipe.ranks_of[m]
        out: list[Value | None] = []
        add = out.append
        lists = t.lists
        if not lists:
            lists.extend([None] * (len(t.external) + len(t.leaves)))
        for n, rule in enumerate(t.external):
            head = rule[0]
            if head == "piece":
                cache, seen = pieces.get(rule[1]), lists[n]
                if seen is not None and seen[0] is cache:
                    lst = seen[1]
                else:
                    lst = None if cache is None else cache.get(rule[2])
                    if lst is not None:
                        lists[n] = (cache, lst)
                add(None if lst is None else lst[ranks[rule[3]]])
            elif head == "run":
                add(running.get(rule[1], {}).get(rule[2]))
            else:
                add(rule[1])
        return out

    def write(self, kind: str, s: int, m: int, outlined: bool = False) -> None:
        """Write unit ``(kind, s, m)`` as a copy of its template, and leave its pieces,
        running sums and layer runs as writing it op by op would. ``outlined`` (the
        program is to be outlined): where the copy has its template's form (the values it
        reads from outside are distinct, as the template's are), it is one placeholder op
        (``Copied``), which ``outline`` makes a call of the template's function."""
        pipe = self.pipe
        t = self.templates[(kind, s)]
        assert t is not None
        b = pipe.b
        start = len(b.ops)
        old, new = "_mb1_d", f"_mb{m}_d"
        # the values from outside the unit, as it starts: its ops change none of them
        ext = self._externals(t, m)
        assert None not in ext[:t.read], "a copied unit's input is missing"
        if outlined and len(t.code) >= 2 and len(set(map(id, ext[:t.read]))) == t.read:
            self._placeholder(t, m, ext)
            return
        flat: list[Value | None] = []
        emit, grow = b.ops.append, flat.extend
        for op, code, names in t.code:
            ins = [None if x is None else flat[x] if x >= 0 else ext[~x] for x in code]
            res = tuple(Value(n.replace(old, new) if n else n) for n in names)
            emit(Op(op.op_type, ins, op.attrs, res))  # attributes are immutable
            grow(res)
        self._leave(t, m, flat + ext[::-1])
        pipe.layer_runs.extend((lb, a + start, e + start) for lb, a, e in t.layers)

    def _leave(self, t: _Template, m: int, value: list[Value | None]) -> None:
        """Leave the pieces and running sums of ``t``'s copy for microbatch ``m``, the
        copy's value of each index ``x`` being ``value[x]`` (those it makes first, then
        ``ext`` reversed: ``value[x]`` is ``ext[~x]`` for ``x < 0``)."""
        pipe = self.pipe
        ranks, size, pieces, running = pipe.ranks_of[m], pipe.vmesh.size, pipe.pieces, \
            pipe.running
        lists = t.lists  # made by ``_externals``, which every copy runs first
        for n, (key, spec, leaves) in enumerate(t.leaves, len(t.external)):
            cache, seen = pieces.get(key), lists[n]
            if seen is not None and seen[0] is cache:
                lst = seen[1]
            else:
                if cache is None:
                    cache = pieces[key] = {}
                lst = cache.get(spec)
                if lst is None:
                    lst = cache[spec] = [None] * size
                lists[n] = (cache, lst)
            for idx, x in leaves:
                lst[ranks[idx]] = value[x]
        for key, j, x in t.sums:
            running[key][j] = value[x]
        for key in t.counted:
            running[key]["m"] = m

    def _placeholder(self, t: _Template, m: int, ext: list[Value | None]) -> None:
        """Unit ``m`` of template ``t`` as a ``Copied`` placeholder: only the values it
        leaves (pieces, running sums) are made."""
        pipe = self.pipe
        assert t.values is not None
        old, new = "_mb1_d", f"_mb{m}_d"
        values = t.values
        made: dict[int, Value] = {}
        at: list[Value | None] = [None] * len(values)  # those left, by index
        for x in t.left:
            n = values[x].name
            made[x] = at[x] = Value(n.replace(old, new) if n else n)

        def value(x: int) -> Value:
            if x < 0:
                return ext[~x]  # type: ignore[return-value]
            y = made.get(x)
            if y is None:
                n = values[x].name
                y = made[x] = Value(n.replace(old, new) if n else n)
            return y

        self._leave(t, m, at + ext[::-1])
        assert t.index_of is not None and t.values is not None
        op = Op(COPIED, ext[:t.read], None, tuple(made.values()))
        pipe.b.ops.append(op)
        pipe.copied[op] = Copied(t.start, len(t.code), t.inner, t.index_of, made, t.values,
                                 value)
