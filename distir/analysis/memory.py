"""Liveness: when each value's storage is allocated and freed, computed once per function.

The model (what ``Simulation.peak_memory_bytes`` measures):

- An entry function's parameters are live throughout the step.
- Every other value is live from the op that defines it to its last use (an op that reads
  it, or the ``return`` that hands it to the caller, after which the caller's liveness
  takes over). A value that is never used is freed right after the op that defines it.
- A value occupies ``type.size_bytes`` on the device its type names, so a transferred value
  counts on the receiving device (a ``Send``'s result) and on the sending one until the
  original's last use.
- Views (the simulator's liveness, ``views=True``): a ``Reshape``, ``Flatten``,
  ``Squeeze``, ``Unsqueeze``, ``Identity``, ``Expand``, ``Split`` or ``Slice`` result is a
  view of its input's storage, as the backend computes it (``VIEW_ALIASES``): it holds no
  bytes of its own, and the storage lives until the last use of it or of any of its
  views. Counting each view as storage of its own over-predicted DeBERTa-v2's step by 24%
  (a key's views saved for the backward pass, an index expanded over batch and heads) and
  Swin-V2's by 17%. An ``Expand``'s storage is freed by its own bytes, not the broadcast
  view's; so is a storage whose parts a ``Split`` or a ``Slice`` (of positive steps)
  views, when the last of them dies (``PARTS``): Hiera's q, k and v sliced from one
  projection, counted each on its own, under-predicted its step by 5%.
- Views by types and strides (``MAYBE_VIEWS``): a ``Transpose``, a reshape whose input
  may be strided, and a ``Slice`` whose steps are passed in (a called layer's constants
  are its parameters), is a view or a copy as the backend finds it where it runs. The facts
  take a guess for each (``guess_copies``; ``FunctionLiveness.maybe``), which the
  simulator checks and flips where it is wrong (``liveness``'s ``flips``, ``after``).
- Calls: a callee's temporaries are counted inside the callee; its results are allocated
  there and become the caller's values. A result that is one of the callee's parameters
  (or the same value returned twice) is an alias, not new storage. An argument whose last
  use is the call, passed once and not returned, is *handed over*: the callee frees it at
  its own last use, and a result the caller never uses is freed inside the callee at its
  last use there: exactly as if the callee were written inline. A part whose storage dies
  at the call is handed over with the rest of its storage's bytes; a broadcast view (or a
  storage passed as two views) is freed by the caller when the call returns
  (``OTHER_BYTES``). A result that is a view of a storage the callee made (a part saved
  for the backward pass) holds that storage for the caller, which frees it with the last
  of its views, by the storage's bytes (``FunctionLiveness.return_sized``; the simulator's
  ``CallSummary.held``): counted by its own bytes, Phi's layers under-counted its step by
  1.9% (their rotary halves of q and k) and Gemma's over-counted it by 6% (its keys
  repeated over the query heads, a broadcast view).

``FunctionLiveness`` holds, per op, what to free after it; it depends only on the
program's structure (and the guesses flipped), never on types, so it is computed once per
function (and per set of flips).
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from itertools import compress, repeat
from operator import attrgetter, is_not, not_
from typing import Any

from distir.analysis.layout import (
    BY_INPUT_OPS,
    CONCAT_OPS,
    CONV_OPS,
    LAYOUT_OPS,
    ORDERED_OPS,
    RESHAPE_OPS,
    STRIDE_OPS,
    WHEN_STRIDED,
    restrides,
)
from distir.ir.core import Function, Op, Value
from distir.ir.types import TensorType, TupleType, Type

__all__ = ["OpLiveness", "FunctionLiveness", "Memo", "liveness", "placed_bytes", "VIEW_ALIASES",
           "ALIASED", "transient_bytes", "PARTS", "OTHER_BYTES", "MAYBE_VIEWS", "guess_copies",
           "STAGED_REDUCE", "reduce_staging_bytes", "staged_bytes", "staged_in_program"]


OpLiveness = tuple
"""What dies at one op, as a plain tuple ``(sig, free_in, free_param, free_out, give, drop)``
(built once per op, read once per simulated op, so kept as cheap as possible):

- ``sig``: the op's static signature ``(op type, attributes key, result count)``, plus
  ``free_out`` where some result is never used, plus, for an op of
  ``layout.LAYOUT_OPS``, the op itself (its cost depends on its input's strides, which the
  simulator finds where the op runs); the simulator prefixes it to its memo keys;
- ``free_in``: input positions whose storage dies after the op (one position per
  storage), not parameters of the function;
- ``free_param``: ``(input position, parameter index)`` of parameters whose last use in
  the function is the op: freed only when the caller handed that parameter over;
- ``free_out``: results never used (freed right after the op; never for a call);
- ``give``: for a call, the arguments handed over to the callee, as ``(mask, params,
  parts)`` (``()`` when none is): ``mask`` is ``bytes`` of one flag per input position,
  set for the values of this function handed over (the simulator's ownership key, made
  once per op), or ``None`` when all are parameters; ``params`` holds ``(input position,
  parameter index)`` of this function's parameters handed over, each only if this
  function owns it; ``parts`` holds ``(input position, storage)`` of the parts
  (``PARTS``) handed over whose callee frees their whole storage's bytes with them (the
  simulator hands the difference over with the part);
- ``drop``: for a call, the positions of the results the caller never uses: the callee
  frees them at their last use inside it, as the inlined program would.
"""

_NO_DROP: frozenset[int] = frozenset()
_TYPE = attrgetter("type")


@dataclass(frozen=True, slots=True)
class FunctionLiveness:
    """Liveness facts of one function, for callers that use all but ``drop`` of its results.

    ``ops`` maps each op to its ``OpLiveness``; ``unused_params`` are parameter indices
    never used nor returned (the caller does not count such an argument as a use);
    ``return_param[i]`` is the index of the parameter that return ``i`` is (an alias),
    else ``None``; ``return_dup[i]`` the index of an earlier return with the same storage,
    else ``None``; ``returned_params`` the parameters returned (never handed over).
    """

    ops: dict[Op, OpLiveness]
    unused_params: frozenset[int]
    return_param: tuple[int | None, ...]
    return_dup: tuple[int | None, ...]
    returned_params: frozenset[int]
    drop: frozenset[int]
    annotated: bool = False
    """Whether some result of an op carries a declared type (to check)."""
    root_frees: dict[Op, tuple[tuple[int, Value, int], ...]] | None = None
    """With ``views``: the ops at which a storage dies that its last reader read through a
    view of other bytes (``OTHER_BYTES``: a broadcast, a part), as
    ``(input position, the storage's value, its parameter index or -1)``: freed by the
    storage's own bytes (a parameter only where the caller handed it over)."""
    maybe: dict[Op, bool] | None = None
    """With ``views``: the ``MAYBE_VIEWS`` ops whose results these facts take for copies
    (``True``) or views (``False``), which the simulator checks where each runs."""
    flips: frozenset[Op] = frozenset()
    """The ``MAYBE_VIEWS`` ops taken against their guess (``liveness``)."""
    peers: dict[Op, tuple[tuple[Op, ...], int]] | None = None
    """Per ``MAYBE_VIEWS`` op, the ops of its function made alike (the same op of the same
    chain of views: a layer's reshape in each layer), in order, and its index among them:
    where the simulator finds one guess wrong, it flips those after it with it."""
    return_sized: tuple[int, ...] = ()
    """With ``views`` (empty where none is): per return, ``1`` where it is (or, by types
    and strides, may be) a view of other bytes than its storage's (a part, a transpose of
    a part), ``2`` where a broadcast, else ``0``. The caller frees such a result with its
    storage (``root_frees``): by its storage's bytes, which the simulator takes from the
    callee's run (``return_storage``), and with the other results of that storage
    (``return_dup``). Whatever the types: a caller's facts do not depend on them."""
    return_storage: tuple[tuple[int, Value], ...] = ()
    """``(return index, its storage's value)`` of the returns of ``return_sized`` that
    alias no parameter and no earlier return, not dropped, as the flips give them: their
    storage's bytes are what the caller frees with them."""


class Memo:
    """Liveness facts per (function, dropped results), and the op signatures interned (so
    that equal signatures are one object and compare by identity). ``resolve``, when set,
    names the representative of a called function whose facts serve it: a function equal
    to it (``==``, the same program up to value names) has the same facts up to its ops,
    and a caller's liveness reads only those of its callees' facts that do not name ops."""

    __slots__ = ("facts", "sigs", "resolve", "views")

    def __init__(self) -> None:
        # Keyed by the function's identity (functions compare by structure); each entry
        # keeps its function alive so that the id is not reused while the memo lives.
        self.facts: dict[tuple, tuple[Function, FunctionLiveness]] = {}
        self.sigs: dict[tuple, tuple] = {}
        self.resolve: Callable[[Function], Function] | None = None
        # per (function, entry): what its views are, whatever the flips (``_ViewFacts``)
        self.views: dict[tuple, tuple[Function, _ViewFacts]] = {}


def liveness(fn: Function, memo: Memo | None = None, drop: frozenset[int] = _NO_DROP,
             entry: bool = False, views: bool = False, flips: frozenset[Op] = frozenset(),
             after: Op | None = None) -> FunctionLiveness:
    """The liveness facts of ``fn`` when its caller drops the results ``drop`` (and, in
    ``memo``, of the functions it calls); ``entry`` where ``fn`` is the program's entry,
    whose parameters are contiguous (``layout_sensitive``). With ``views``, the results
    of ``VIEW_ALIASES`` are views of their input's storage, as the backend computes them
    (``_aliases``): they hold no bytes of their own, and the storage lives until its last
    view's last use. A ``Transpose``, and a reshape of an input that may be strided, is a
    view or a copy by its types and strides (``MAYBE_VIEWS``): each is taken as its guess
    says (``FunctionLiveness.maybe``) but for those in ``flips``, taken the other way: the
    simulator flips an op where it finds its guess wrong, and the facts of the ops before
    it stay the same: with ``after``, only the facts of the ops from ``after`` on are made
    (for a run past the ops before it; not memoized).

    One forward pass over the calls (and views) finds the results that alias another
    value's storage; one backward pass finds each storage's last use (the first use seen
    backwards)."""
    if memo is None:
        memo = Memo()
    key: tuple = (id(fn), drop, entry, views, flips) if entry or views else (id(fn), drop)
    hit = memo.facts.get(key)
    if hit is not None:
        return hit[1]
    sigs = memo.sigs
    annotated = False
    vf = _view_facts(fn, memo, entry) if views else None
    sensitive = layout_sensitive(fn, entry) if vf is None else vf.sensitive
    peers = {} if vf is None else vf.peers
    alias, sized, broadcast, aliased, maybe = _aliases(fn, memo, views, sensitive, flips, vf)
    root_frees: dict[Op, tuple[tuple[int, Value, int], ...]] = {}
    param_index: dict[Value, int] = {p: i for i, p in enumerate(fn.params)}
    kept = [alias.get(r, r) for i, r in enumerate(fn.returns) if i not in drop]
    live: set[Value | None] = set(kept)  # storages used later, or returned (None: an
    live.add(None)                        # omitted input, never freed)
    infos: dict[Op, OpLiveness] = {}
    live_add = live.add
    for op in reversed(fn.ops if after is None or vf is None else fn.ops[vf.at[after]:]):
        outs = op.outputs
        akey = op._key
        if akey is None:
            akey = op.attrs_key
        if op.callee is None:  # the common case, kept tight
            if len(outs) == 1:
                out = outs[0]
                free_out: tuple[int, ...] = () if out in live else (0,)
                if out.type is not None:
                    annotated = True
            else:
                free_out = tuple(i for i, v in enumerate(outs) if v not in live)
                if any(v.type is not None for v in outs):
                    annotated = True
            sig: tuple
            if op in aliased:  # views of its input's storage: no bytes of their own
                free_out = ()
                sig = (op.op_type, akey, len(outs), ALIASED)
            # (Unused results are part of the signature: an op may skip computing them.)
            elif free_out:
                sig = (op.op_type, akey, len(outs), free_out)
            else:
                sig = (op.op_type, akey, len(outs))
            sig = sigs.setdefault(sig, sig)
            if op in sensitive:  # its cost depends on its input's strides
                # (``distir.analysis.layout``): a record of its own; a reshape's, a
                # reduction's, a concatenation's or an elementwise op's are shared by its
                # layout (``BY_STRIDES``)
                if op.op_type in WHEN_STRIDED:
                    sig = (*sig, BY_STRIDES)
                    sig = sigs.setdefault(sig, sig)
                else:
                    sig = (*sig, op)
            ins = op.inputs
            if alias and not alias.keys().isdisjoint(ins):
                ins = tuple(map(alias.get, ins, ins))  # type: ignore[arg-type]
            if live.issuperset(ins):  # nothing dies here (None counts as live)
                infos[op] = (sig, (), (), free_out, (), _NO_DROP)
                continue
            free_in: list[int] | None = None
            free_param: list[tuple[int, int]] | None = None
            for pos, x in enumerate(ins):
                if x not in live:  # (never None: None is in ``live``)
                    live_add(x)
                    pi = param_index.get(x)  # type: ignore[arg-type]
                    if sized and op.inputs[pos] in sized:  # read through a view of other bytes
                        root_frees[op] = (*root_frees.get(op, ()),
                                          (pos, x, -1 if pi is None else pi))  # type: ignore
                    elif pi is None:
                        if free_in is None:
                            free_in = [pos]
                        else:
                            free_in.append(pos)
                    elif free_param is None:
                        free_param = [(pos, pi)]
                    else:
                        free_param.append((pos, pi))
            infos[op] = (sig, () if free_in is None else tuple(free_in),
                         () if free_param is None else tuple(free_param), free_out, (),
                         _NO_DROP)
            continue
        sig = sigs.setdefault((op.op_type, akey, len(outs)), (op.op_type, akey, len(outs)))
        # (C-level passes: a stage call has hundreds of results and thousands of inputs.)
        out_roots = list(map(alias.get, outs, outs)) if alias else outs
        dropped = frozenset(compress(range(len(outs)),
                                     map(not_, map(live.__contains__, out_roots))))
        if not annotated and any(map(is_not, map(_TYPE, outs), repeat(None))):
            annotated = True
        cl = liveness(op.callee if memo.resolve is None else memo.resolve(op.callee), memo,
                      dropped, views=views)
        skip = cl.unused_params
        get = alias.get
        roots = list(map(get, op.inputs, op.inputs)) if alias else op.inputs  # type: ignore
        # The positions of the arguments not live after the call, by C-level scans (calls
        # pass thousands of arguments, of which few die here, such as a microbatch's
        # activation). Never None: None is in ``live``.
        gone = list(compress(range(len(roots)), map(not_, map(live.__contains__, roots))))
        parts: list[tuple[int, Value]] = []
        if gone and sized and not sized.isdisjoint(op.inputs):
            # A storage passed as a view of other bytes: the caller frees it after the call,
            # but for one of this function's passed once as a part (not a broadcast), which
            # the callee frees with the rest of its storage's bytes (``OpLiveness``'s give).
            viewed = {roots[p] for p in gone if op.inputs[p] in sized}
            times = Counter(roots[p] for p in gone if roots[p] in viewed)
            frees: list[tuple[int, Value, int]] = []
            for p in gone:
                r = roots[p]
                if r in viewed and r not in live:
                    live_add(r)
                    pi = param_index.get(r, -1)  # type: ignore[arg-type]
                    if times[r] == 1 and pi < 0 and op.inputs[p] not in broadcast and \
                            p not in skip and p not in cl.returned_params:
                        parts.append((p, r))  # type: ignore[arg-type]
                    else:
                        frees.append((p, r, pi))  # type: ignore[arg-type]
            if frees:
                root_frees[op] = tuple(frees)
            gone = [p for p in gone if roots[p] not in viewed]
        if not gone:  # no argument dies here
            infos[op] = (sig, (), (), (), _with_parts(len(roots), (), parts) if parts else (),
                         dropped)
            continue
        dead = list(map(roots.__getitem__, gone))
        if len(set(dead)) == len(dead) and skip.isdisjoint(gone) and \
                cl.returned_params.isdisjoint(gone):
            # The common case (a microbatch's activations, each passed once): every
            # argument that dies here is handed over, as the loop below would find.
            live.update(dead)
            if param_index.keys().isdisjoint(dead):  # (the usual case: no parameter)
                give_op: tuple = (_mask(len(roots), gone), (), ())
            else:
                pget: Any = param_index.get
                give_op = _give(len(roots), list(zip(gone, map(pget, dead, repeat(-1)))))
            infos[op] = (sig, (), (), (), _with_parts(len(roots), give_op, parts) if parts
                         else give_op, dropped)
            continue
        # Each storage first dies at its first position not an unused parameter of the
        # callee (untouched arguments are no use); one passed twice is not handed over.
        dying: list[tuple[int, Value]] = []
        passed: dict[Value, int] = {}  # how often each dying storage is passed
        for pos in gone:
            r = roots[pos]
            assert r is not None
            n = passed.get(r)
            passed[r] = 1 if n is None else n + 1
            if r in live or pos in skip:
                continue
            live_add(r)
            dying.append((pos, r))
        c_in: list[int] = []
        c_param: list[tuple[int, int]] = []
        give: list[tuple[int, int]] = []
        for pos, r in dying:
            pi = param_index.get(r, -1)
            if pos not in cl.returned_params and passed[r] == 1:
                give.append((pos, pi))
            elif pi >= 0:
                c_param.append((pos, pi))
            else:
                c_in.append(pos)
        give_op = _give(len(roots), give) if give else ()
        infos[op] = (sig, tuple(c_in), tuple(c_param), (),
                     _with_parts(len(roots), give_op, parts) if parts else give_op, dropped)
    unused = frozenset(i for i, p in enumerate(fn.params) if p not in live)
    ret_param: list[int | None] = []
    ret_dup: list[int | None] = []
    first_ret: dict[Value, int] = {}
    own = frozenset() if vf is None else vf.own
    for i, r in enumerate(fn.returns):
        if i in own:  # (a storage of its own or a view, by the flips: the caller's facts
            ret_param.append(None)  # take it for one of its own, by its storage's bytes)
            ret_dup.append(None)
            continue
        rr = alias.get(r, r)
        ret_param.append(param_index.get(rr))
        if rr in first_ret and rr not in param_index:
            ret_dup.append(first_ret[rr])
        else:
            ret_dup.append(None)
            first_ret.setdefault(rr, i)
    returned_params = frozenset(j for i, j in enumerate(ret_param)
                                if j is not None and i not in drop)
    rsized = () if vf is None else vf.sized
    storage = () if not rsized else tuple(
        (i, alias.get(r, r)) for i, r in enumerate(fn.returns)
        if rsized[i] and i not in drop and ret_param[i] is None and ret_dup[i] is None)
    fl = FunctionLiveness(infos, unused, tuple(ret_param), tuple(ret_dup), returned_params,
                          drop, annotated, root_frees or None, maybe or None, flips,
                          peers or None, rsized, storage)
    if after is None:
        memo.facts[key] = (fn, fl)
    return fl


VIEW_ALIASES = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity",
                          "Expand", "Split", "Slice"})
"""Ops the PyTorch backend computes as views of their first input whatever the types (its
lowerings registered with ``view=True``, less those that copy for some types: a
``Transpose`` of unaligned rows or of a batch axis, a ``Cast`` to another type; and a
``Slice`` but of negative steps, which ``index_select`` copies). A ``Reshape`` of a
strided input that no view gives copies: one whose input may be strided
(``layout_sensitive``) is a view or a copy by its input's strides where it runs
(``MAYBE_VIEWS``), as is a ``Transpose``. An ``Expand`` is a view
of other bytes than its storage (``SIZED``): a ``Reshape`` or ``Flatten`` of it is a
``MAYBE_VIEWS`` op, guessed a copy (no view merges a broadcast axis with an axis of
another stride: a grouped-query attention's keys repeated over query heads), which the
simulator checks by strides (merging it with an axis of length 1 is a view: the keys of
one key-value head repeated so), and a copy where nothing checks it. A part (``PARTS``) is
a view of fewer bytes than its storage, which lives while any part does."""

SIZED = frozenset({"Expand"})
"""The ``VIEW_ALIASES`` whose results are broadcast views of their storage: a ``Reshape``
or ``Flatten`` of such a view copies but where the simulator finds a view by its strides
(``OTHER_BYTES``, ``VIEW_ALIASES``)."""

PARTS = frozenset({"Split", "Slice"})
"""The ``VIEW_ALIASES`` whose results are parts of their input's storage. PyTorch keeps the
whole storage while any part lives: Hiera-B's q, k and v, three ``Slice``s of one
projection, held it all until the last of them was read (its one-GPU step 5% above the
model that counted each part on its own). A ``Slice`` whose steps are not known to be
positive (a ``Constant``) is taken for a copy."""

OTHER_BYTES = SIZED | PARTS
"""The ``VIEW_ALIASES`` whose results are views of other bytes than their storage's (a
broadcast, a part): the storage is freed by its own bytes
(``FunctionLiveness.root_frees``); passed to a callee, it is handed over with the rest of
the storage's bytes where it is a part passed once (the callee frees them all at its last
use, as the inlined program would), else freed by the caller after the call (held until
the call returns where the inlined program would free it at its last use inside); and it
is a view where the function returns it: its storage is held for the caller, which
frees it with the result (``FunctionLiveness.return_sized``)."""

ALIASED = ("storage", "a view")
"""Ends the signature of a view computed as an alias of its input's storage (``liveness``
with ``views``): its record allocates nothing."""


MAYBE_VIEWS = frozenset({"Transpose", "Slice", *RESHAPE_OPS})
"""Ops the backend computes as views or copies by their types and strides: a ``Transpose``
copies where it moves a batch axis or a row of unaligned bytes
(``cost.compute.copied_transpose``), a ``Reshape`` or ``Flatten`` of a strided input where
no view gives its result (``layout.Layouts.reshape_layout``), a ``Slice`` where its steps
are not all positive (``index_select``); a view holds its input's storage alive. The
liveness guesses (``guess_copies`` for a ``Transpose``; a reshape whose input may be
strided, ``layout_sensitive``, copies but of a chain of parts of a tensor:
``_view_facts``) and the simulator, which knows the types and strides where the
op runs, flips a wrong guess (``liveness``'s ``flips``). Hiera-B's k, a ``Transpose`` of
the last two axes of a ``Slice`` of its projection, and its q reshaped, are views that the
allocator never held twice. A ``Slice`` whose steps are not a ``Constant`` of its
function is guessed a view, which the simulator checks by their value. One whose result
the function returns (through views) is a storage of its own to the caller, of the bytes
the callee's run finds, and taken for a copy where it would make the result a
parameter's storage or another return's (``_returns``): its caller's facts must not
depend on types."""


def guess_copies(op: Op) -> bool:
    """The liveness's guess whether a ``Transpose`` copies: by its input's declared type
    where it has one (``cost.compute.copied_transpose``: a program's weights), else where
    it moves an axis but the last two (or its ``perm`` is not given)."""
    from distir.analysis.cost.compute import copied_transpose, copies_batch_axes

    perm = op.attrs.get("perm")
    t = op.inputs[0].type if op.inputs and op.inputs[0] is not None else None
    if isinstance(t, TensorType) and (perm is None or isinstance(perm, tuple | list)) and \
            all(isinstance(d, int) for d in t.shape):
        return copied_transpose(tuple(t.shape), t.dtype.itemsize, perm)
    return not isinstance(perm, tuple | list) or copies_batch_axes(len(perm), perm)


_PART_CHAIN = PARTS | {"Squeeze", "Unsqueeze", "Identity", *RESHAPE_OPS}


@dataclass(frozen=True, slots=True)
class _ViewFacts:
    """What a function's views are, whatever the flips, found once per function
    (``_view_facts``)."""

    sensitive: frozenset[Op]
    """``layout_sensitive(fn, entry)``."""
    guesses: dict[Op, bool]
    """Per ``MAYBE_VIEWS`` op, the liveness's guess whether it copies."""
    peers: dict[Op, tuple[tuple[Op, ...], int]]
    """``FunctionLiveness.peers``."""
    at: dict[Op, int]
    """Per ``MAYBE_VIEWS`` op, its position in the function."""
    steps: dict[Op, bool | None]
    """``_slice_steps``."""
    returned: frozenset[Op]
    """The views taken for copies because a returned value may be their view
    (``_returns``)."""
    sized: tuple[int, ...]
    """``FunctionLiveness.return_sized`` (``_returns``)."""
    own: frozenset[int]
    """The returns whose storage is a view or not by types and strides, each taken by its
    caller for a storage of its own (``_returns``)."""


_VIEWISH = VIEW_ALIASES | {"Transpose"}
"""The ops whose results may be views of their input's storage (``VIEW_ALIASES`` and the
``MAYBE_VIEWS`` ``Transpose``)."""


def _view_facts(fn: Function, memo: Memo, entry: bool) -> _ViewFacts:
    """``layout_sensitive(fn, entry)``, and the ``MAYBE_VIEWS`` ops of ``fn`` (its
    transposes, and its reshapes whose input may be strided), each with the liveness's
    guess (whether it copies: ``guess_copies``; a reshape copies but of a chain of parts of
    a tensor, ``Split`` or ``Slice`` and reshapes), its peers (``FunctionLiveness.peers``):
    ops alike by their chain of views (op types and attributes), and its position in
    ``fn``; the ``Slice``s of known positive steps, and the views a returned value makes
    copies of and what the returns are to a caller (``_returns``); computed once per
    function."""
    key = (id(fn), entry)
    hit = memo.views.get(key)
    if hit is not None:
        return hit[1]
    sensitive = layout_sensitive(fn, entry)
    steps = _slice_steps(fn)
    # Each chain of views (op types and attributes down to its start) as a number, with
    # whether it takes only parts and reshapes of its start (and some part).
    chain: dict[Value, int] = {}
    kinds: dict[tuple, int] = {}
    only: list[bool] = []  # only parts, reshapes, squeezes
    has: list[bool] = []  # some part
    guessed: dict[tuple, bool] = {}  # a Transpose's guess by its attributes
    guesses: dict[Op, bool] = {}
    at: dict[Op, int] = {}
    groups: dict[int, list[Op]] = {}
    for i, op in enumerate(fn.ops):
        t = op.op_type
        if t not in _VIEWISH or op.callee is not None or not op.outputs or not op.inputs or \
                op.inputs[0] is None:
            continue
        below = chain.get(op.inputs[0], -1)
        akey = op._key
        if akey is None:
            akey = op.attrs_key
        k = kinds.get((t, akey, below))
        if k is None:
            k = kinds[(t, akey, below)] = len(only)
            only.append(t in _PART_CHAIN and (below < 0 or only[below]))
            has.append(t in PARTS or (below >= 0 and has[below]))
        for v in op.outputs:
            chain[v] = k
        if t == "Transpose":
            x = op.inputs[0].type
            g = guessed.get(akey) if x is None else None
            if g is None:
                g = guess_copies(op)
                if x is None:
                    guessed[akey] = g
            guesses[op] = g
        elif t in RESHAPE_OPS and op in sensitive:
            guesses[op] = below < 0 or not (only[below] and has[below])
        elif t == "Slice" and steps.get(op, True) is None:
            guesses[op] = False  # (steps passed in: a view where the simulator finds them
        else:                    # positive)
            continue
        at[op] = i
        groups.setdefault(k, []).append(op)
    peers: dict[Op, tuple[tuple[Op, ...], int]] = {}
    for ops in groups.values():
        members = tuple(ops)
        for i, op in enumerate(members):
            peers[op] = (members, i)
    vf = _ViewFacts(sensitive, guesses, peers, at, steps,
                    *_returns(fn, memo, sensitive, guesses, steps))
    memo.views[key] = (fn, vf)
    return vf


def _aliases(fn: Function, memo: Memo, views: bool, sensitive: frozenset[Op] = frozenset(),
             flips: frozenset[Op] = frozenset(), vf: _ViewFacts | None = None,
             ) -> tuple[dict[Value, Value], set[Value], set[Value], set[Op], dict[Op, bool]]:
    """``liveness``' forward pass: the values that are another's storage (by value: the
    value owning it), among them those of other bytes than it (``OTHER_BYTES`` views:
    ``sized``; among them the broadcasts, ``SIZED``), the view ops computed as aliases, and
    the ``MAYBE_VIEWS`` ops checked where they run (``FunctionLiveness.maybe``). A call's
    result that is one of the callee's parameters (or the same storage as an earlier
    result) is its argument's storage, and one that is a view of other bytes
    (``FunctionLiveness.return_sized``) is sized. With ``views``, a ``VIEW_ALIASES``
    result is its input's; the views by types and strides that a returned value would make
    its storage a parameter's or another return's hold storage of their own
    (``_returns``), whatever the flips: a caller's facts and those of the ops before a flip
    do not depend on them."""
    alias, sized, broadcast, aliased, maybe, _ = _forward(
        fn, memo, views and vf is not None, sensitive, flips,
        None if vf is None else vf.guesses, {} if vf is None else vf.steps,
        frozenset() if vf is None else vf.returned, False)
    return alias, sized, broadcast, aliased, maybe


def _forward(fn: Function, memo: Memo, views: bool, sensitive: frozenset[Op],
             flips: frozenset[Op], guesses: dict[Op, bool] | None,
             steps: dict[Op, bool | None], copied: frozenset[Op], every_view: bool,
             ) -> tuple[dict[Value, Value], set[Value], set[Value], set[Op], dict[Op, bool],
                        dict[Value, tuple[Op, Value]]]:
    """``_aliases``' pass over ``fn``'s ops, the ops ``copied`` taken for copies, the
    ``MAYBE_VIEWS`` ops as their guesses and ``flips`` say (every one a view with
    ``every_view``); with what each alias was made from (its op and source value)."""
    resolve = memo.resolve
    alias: dict[Value, Value] = {}
    sized: set[Value] = set()  # views of other bytes than their storage's
    broadcast: set[Value] = set()  # among them, broadcasts (SIZED)
    aliased: set[Op] = set()
    maybe: dict[Op, bool] = {}
    made: dict[Value, tuple[Op, Value]] = {}
    for op in fn.ops:
        if op.callee is None:
            t = op.op_type
            if views and t in _VIEWISH and op.outputs and \
                    op.inputs and op.inputs[0] is not None and op not in copied:
                x = op.inputs[0]
                guess = guesses.get(op) if guesses else None
                if t in RESHAPE_OPS and x in broadcast and guess is None:
                    continue  # (a copy, unless the simulator checks it by strides)
                if guess is not None:  # (by types and strides: the simulator's check)
                    copies = False if every_view else guess != (op in flips)
                    maybe[op] = copies
                    if copies:
                        continue
                elif t == "Transpose" or (t in RESHAPE_OPS and op in sensitive):
                    continue  # (without ``views``' guesses: taken for a copy)
                if t == "Slice" and steps.get(op, True) is False:
                    continue  # (steps not all positive: an index_select)
                r = alias.get(x, x)
                aliased.add(op)
                for v in op.outputs:
                    alias[v] = r
                    made[v] = (op, x)
                    if t in OTHER_BYTES or x in sized:
                        sized.add(v)
                        if t in SIZED or x in broadcast:
                            broadcast.add(v)
            continue
        cl = liveness(op.callee if resolve is None else resolve(op.callee), memo, views=views)
        outs = op.outputs
        rs = cl.return_sized
        for i, (j, dup) in enumerate(zip(cl.return_param, cl.return_dup)):
            k = rs[i] if rs else 0  # a view of other bytes (its storage's: the callee's)
            if j is None and dup is None:
                if k:
                    sized.add(outs[i])
                    if k == 2:
                        broadcast.add(outs[i])
                continue
            arg = op.inputs[j] if j is not None and j < len(op.inputs) else None
            src = arg if arg is not None else outs[dup] if dup is not None else None
            if src is not None:
                v = outs[i]
                alias[v] = alias.get(src, src)
                made[v] = (op, src)
                if k or src in sized:
                    sized.add(v)
                    if k == 2 or src in broadcast:
                        broadcast.add(v)
    for p in copied.intersection(maybe):
        del maybe[p]  # (taken for copies whatever the types)
    return alias, sized, broadcast, aliased, maybe, made


def _returns(fn: Function, memo: Memo, sensitive: frozenset[Op],
             guesses: dict[Op, bool] | None, steps: dict[Op, bool | None],
             ) -> tuple[frozenset[Op], tuple[int, ...], frozenset[int]]:
    """What ``fn``'s returns are to its callers, whatever the flips: the views to take for
    copies, ``FunctionLiveness.return_sized``, and the returns each taken for a storage of
    its own (``_ViewFacts``). Walking back from each returned value through views and
    calls' aliased results with every ``MAYBE_VIEWS`` op a view (the most chains any flips
    give), a return reached through such an op is a view or a storage of its own by types
    and strides: its caller takes it for a storage of its own, freed by the bytes of what
    the callee's run finds its storage (``return_storage``); but where its storage would
    be a parameter's, or another return's (or it is returned twice), its caller's facts
    would depend on the flips: the first such op on its way is taken for a copy. A view
    of other bytes reached through none (a part, a broadcast) is one: its storage is held
    for the caller, which frees it with the result."""
    returned = set(fn.returns)
    if not any((op.callee is not None or op.op_type in _VIEWISH) and
               not returned.isdisjoint(op.outputs) for op in fn.ops):
        return frozenset(), (), frozenset()  # (no returned value is a view or a call's)
    params = set(fn.params)
    found: set[Op] = set()
    while True:
        alias, sized, broadcast, _, maybe, made = _forward(
            fn, memo, True, sensitive, frozenset(), guesses, steps, frozenset(found), True)
        firsts: list[Op | None] = []  # per return, the first MAYBE_VIEWS op on its way
        for r in fn.returns:
            v, first = r, None
            seen: set[Value] = set()
            while v in made and v not in seen:
                seen.add(v)
                op, src = made[v]
                if op.callee is None and op in maybe:
                    first = op
                    break
                v = src
            firsts.append(first)
        roots = [alias.get(r, r) for r in fn.returns]
        count = Counter(roots)
        new = {op for op, root in zip(firsts, roots)
               if op is not None and (root in params or count[root] > 1)}
        if not new:
            break
        found |= new
    sized_of = tuple(2 if r in broadcast else 1 if r in sized or first is not None else 0
                     for r, first in zip(fn.returns, firsts))
    return (frozenset(found), sized_of if any(sized_of) else (),
            frozenset(i for i, first in enumerate(firsts) if first is not None))


def _slice_steps(fn: Function) -> dict[Op, bool | None]:
    """Per ``Slice`` of ``fn`` given steps, whether they are all positive (a view), by the
    ``Constant`` of ``fn`` that gives them; ``None`` where another op or a parameter gives
    them (a layer's constants are its parameters): the simulator checks them by their
    value (``MAYBE_VIEWS``)."""
    sliced = [op for op in fn.ops if op.op_type == "Slice" and len(op.inputs) > 4 and
              op.inputs[4] is not None]
    if not sliced:
        return {}
    from distir.analysis.numpy_rules.onnx_ops import constant_value

    consts = {op.outputs[0]: op for op in fn.ops
              if op.op_type == "Constant" and len(op.outputs) == 1}
    out: dict[Op, bool | None] = {}
    for op in sliced:
        c = consts.get(op.inputs[4])  # type: ignore[arg-type]
        if c is None:
            out[op] = None
            continue
        try:
            out[op] = bool((constant_value(c.attrs) > 0).all())
        except (TypeError, ValueError):  # (a malformed Constant: its rule names it)
            out[op] = False
    return out


BY_STRIDES = ("records", "by strides")
"""Ends the signature of a reshape, a reduction, a concatenation or an elementwise op
whose inputs may be strided (``layout_sensitive``): its records are keyed by its layout
(whether a reshape copies, a reduction's input strides, a concatenation's strided parts,
an elementwise op's operands read across: ``Simulator._input_layout``), not by the op."""


def layout_sensitive(fn: Function, entry: bool = False) -> frozenset[Op]:
    """The ops of ``fn`` whose cost depends on their inputs' strides
    (``layout.LAYOUT_OPS``): every convolution and indexing op of them, and the reshapes
    and reductions (``layout.BY_INPUT_OPS``) whose input may be strided (a parameter, a
    call's result, a ``STRIDE_OPS`` view), and the concatenations and elementwise ops
    (``layout.ORDERED_OPS``) any of whose inputs may be: another op's result is
    contiguous, and so is a reshape of it (a view), but for an elementwise op's, which
    takes its operands' order. The parameters of the program's ``entry`` are contiguous
    (the caller's types); a called function's may be views."""
    types = {op.op_type for op in fn.ops}
    if LAYOUT_OPS.isdisjoint(types):
        return frozenset()
    if WHEN_STRIDED.isdisjoint(types):
        return frozenset(op for op in fn.ops if op.op_type in LAYOUT_OPS)
    maybe: set[Value | None] = set() if entry else set(fn.params)
    out: list[Op] = []
    for op in fn.ops:
        t = op.op_type
        if t not in _WATCHED:
            if op.callee is not None:
                maybe.update(op.outputs)
            continue
        if t in CONCAT_OPS:  # any of its inputs; its result is contiguous
            if not maybe.isdisjoint(op.inputs):
                out.append(op)
            continue
        if t in ORDERED_OPS:  # any of its inputs; its result takes their order
            if not maybe.isdisjoint(op.inputs):
                out.append(op)
                maybe.update(op.outputs)
            continue
        strided = bool(op.inputs) and op.inputs[0] in maybe
        if t in RESHAPE_OPS:
            if strided:
                out.append(op)
        elif t in LAYOUT_OPS:  # a result of its own, contiguous
            if strided or t not in BY_INPUT_OPS:
                out.append(op)
            if t in CONV_OPS and strided and _may_run_channels_last(op):
                maybe.update(op.outputs)  # (it then writes its results so)
            continue
        if strided or restrides(op):  # (a view of a contiguous input is contiguous
            maybe.update(op.outputs)    # but for a part, a broadcast or a transpose)
    return frozenset(out)


_WATCHED = STRIDE_OPS | LAYOUT_OPS


def _may_run_channels_last(op: Op) -> bool:
    """Whether a convolution of a strided view may run channels-last: a 2-D one (or one
    whose ``kernel_shape`` is not given); a 1-D one runs on contiguous tensors
    (``layout``)."""
    k = op.attrs.get("kernel_shape")
    return not isinstance(k, tuple | list) or len(k) == 2


def _mask(n: int, positions: list[int]) -> bytes:
    """``n`` flags, set at ``positions`` (by C-level passes: calls pass thousands)."""
    m = bytearray(n)
    deque(map(m.__setitem__, positions, repeat(1)), 0)
    return bytes(m)


def _give(n: int, give: list[tuple[int, int]]) -> tuple:
    """``give``'s ``(mask, params, parts)`` form (see ``OpLiveness``) from ``(position,
    parameter index or -1)`` pairs."""
    local = [pos for pos, pi in give if pi < 0]
    return (_mask(n, local) if local else None,
            tuple((pos, pi) for pos, pi in give if pi >= 0), ())


def _with_parts(n: int, give: tuple, parts: list[tuple[int, Value]]) -> tuple:
    """``give`` (``()`` or its ``(mask, params, ())`` form) with ``parts`` handed over too:
    ``(position, storage)`` of parts whose storage the callee frees."""
    mask = bytearray(n) if not give or give[0] is None else bytearray(give[0])
    for pos, _ in parts:
        mask[pos] = 1
    return (bytes(mask), give[1] if give else (), tuple(parts))


def transient_bytes(op_type: str, in_types: tuple) -> int:
    """The bytes of a temporary an op's kernel holds while it runs, on top of its results
    (``allocator.TRANSIENT_INPUT``, ``allocator.TRANSIENT_AFTER``: the loss's log-softmax of
    its logits, the softmax gradient's product of ``dy`` and ``y``), as measured by
    ``calibration.memory_trace``; 0 for other ops."""
    from distir.analysis.allocator import TRANSIENT_AFTER, TRANSIENT_INPUT

    i = 0 if op_type in TRANSIENT_INPUT else TRANSIENT_AFTER.get(op_type)
    if i is None or i >= len(in_types):
        return 0
    t = in_types[i]
    return t.size_bytes if isinstance(t, TensorType) else 0


STAGED_REDUCE = frozenset({"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin",
                           "ReduceProd"})
"""Reductions the backend runs as one ATen reduction kernel (``torch.sum``, ``mean``,
``amax``, ``amin``, ``prod``), which stages partial results in global memory where it
splits the reduced elements across thread blocks (``reduce_staging_bytes``)."""


def reduce_staging_bytes(shape: tuple[int, ...], axes: tuple[int, ...], sm_count: int,
                         acc_bytes: int = 4, strides: tuple[int, ...] | None = None,
                         threads_per_sm: int = 2048, max_threads: int = 512) -> int:
    """The bytes a CUDA reduction of ``shape`` over ``axes`` (element strides ``strides``;
    contiguous if ``None``) allocates while it runs, on a device of ``sm_count``
    multiprocessors: PyTorch's reduction kernel splits each output's elements across thread
    blocks where each thread would sum more than 256 of them and the outputs fill less than
    the device, and stages the blocks' partial results (``acc_bytes`` each: float32 for
    the floating types) in a buffer of the caching allocator, with a semaphore per column
    of blocks. The kernel's launch configuration (block shape, blocks per output) is
    worked out here as the library does. A column sum, the bias gradient of a linear
    layer, stages twice its input up to about 132 MiB on an H200: measured 24-133 MiB for
    nine shapes to the byte (``grid_search/results/parts_views/transient_probe.py``).
    0 where nothing is staged."""
    rank = len(shape)
    red = {a % rank for a in axes} if rank else set()
    if strides is None:
        order = list(range(rank))
    else:  # (TensorIterator visits the axes by stride: the smallest innermost)
        order = sorted(range(rank), key=lambda d: -abs(strides[d]))
    dims = [d for d in order if shape[d] != 1]  # outer to inner
    numel = math.prod(shape)
    if not dims or numel == 0 or red.isdisjoint(dims):
        return 0
    outputs = math.prod(shape[d] for d in dims if d not in red)
    per_output = numel // outputs
    on_fastest = dims[-1] in red
    vec = 1
    if on_fastest:
        # runs of reduced axes, each one axis once adjacent ones are merged
        runs = sum(1 for i, d in enumerate(dims) if d in red and (i == 0 or dims[i - 1] not in red))
        dim0, dim1 = per_output, outputs
        if dim0 > 128 and runs == 1:
            dim0 //= 4  # (each thread loads 4 inputs at once)
    else:
        inner = 1
        for d in reversed(dims):
            if d in red:
                break
            inner *= shape[d]
        vec = 4
        while vec > 1 and inner % vec:
            vec //= 2
        dim0, dim1 = outputs // vec, per_output
    cap = max_threads // vec
    d0 = cap if dim0 >= cap else 1 << (max(dim0, 1).bit_length() - 1)
    d1 = cap if dim1 >= cap else 1 << (max(dim1, 1).bit_length() - 1)
    width = min(d0, 32)
    height = min(d1, cap // width)
    width = min(d0, cap // height)
    step_in = step_out = 1
    if on_fastest:
        step_in *= width  # (threads of a row share an output)
    else:
        step_out *= width
    split_y = -(-per_output // step_in) >= height * 16 or -(-per_output // step_in) >= 256
    if split_y:
        step_in *= height
    else:
        step_out *= height
    per_thread = -(-per_output // step_in)
    target = sm_count * (threads_per_sm // (width * height))
    grid = -(-(outputs // vec) // step_out)
    if not split_y or per_thread < 256 or grid > target:
        return 0
    ctas = max(min(-(-target // grid), -(-per_thread // 16)), -(-per_thread // 256))
    if ctas <= 1:
        return 0
    size = acc_bytes * outputs * ctas * (1 if on_fastest else width * vec)
    return -(-size // 512) * 512 + -(-4 * grid // 512) * 512  # (the allocator's 512-byte
    # blocks)


def staged_bytes(op: Op, t: Any, axes: Any, sm_count: int,
                 strides: tuple[int, ...] | None = None) -> int:
    """``reduce_staging_bytes`` of ``op`` where it is a ``STAGED_REDUCE`` op of a floating
    input of type ``t`` (element strides ``strides``; contiguous if ``None``): ``axes`` the
    value of its axes input (an array), ``None`` where it has none (its ``axes`` attribute,
    else every axis; none with ``noop_with_empty_axes``); 0 for other ops."""
    if op.op_type not in STAGED_REDUCE or not sm_count or not isinstance(t, TensorType) or \
            not t.dtype.is_float:
        return 0
    if axes is not None:
        reduced = [int(a) for a in axes.reshape(-1)]
    else:
        raw = op.attrs.get("axes")
        reduced = [int(a) for a in raw] if isinstance(raw, tuple | list) else []
    if not reduced:
        if op.attrs.get("noop_with_empty_axes", 0):
            return 0
        reduced = list(range(len(t.shape)))
    return reduce_staging_bytes(tuple(t.shape), tuple(reduced), sm_count,
                                8 if t.dtype.itemsize == 8 else 4, strides)


def staged_in_program(op: Op, consts: dict[Value, Op], sm_count: int) -> int:
    """``staged_bytes`` of one op of a flat typed program (a rank's, as
    ``calibration.memory_trace`` and the allocator replay read one), its input taken as
    contiguous and its axes input the value of a ``Constant`` of the program (``consts``:
    by its result); 0 where that input is something else."""
    if op.op_type not in STAGED_REDUCE or not sm_count or not op.inputs or \
            op.inputs[0] is None:
        return 0
    axes = None
    if len(op.inputs) > 1 and op.inputs[1] is not None:
        c = consts.get(op.inputs[1])
        if c is None:
            return 0
        from distir.analysis.numpy_rules.onnx_ops import constant_value

        axes = constant_value(c.attrs)
    return staged_bytes(op, op.inputs[0].type, axes, sm_count)


def placed_bytes(t: Any) -> tuple[tuple[int, int], ...]:
    """``((device, bytes), ...)`` that a value of type ``t`` occupies."""
    if isinstance(t, TensorType):
        return ((t.device, t.size_bytes),)
    if isinstance(t, TupleType):
        out: list[tuple[int, int]] = []
        for s in t.types:
            out.extend(placed_bytes(s))
        return tuple(out)
    if isinstance(t, Type):
        return tuple((d, t.size_bytes) for d in t.devices[:1])
    return ()
