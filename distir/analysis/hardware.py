"""Hardware profiles: what the simulator's cost rules read.

A profile describes one kind of device and how devices are linked. It is a JSON file
(format ``distir-hardware/1``, documented in ``calibration/README.md``) holding:

- the device: memory capacity (bytes), peak FLOP/s per dtype, memory bandwidth (bytes/s),
  kernel launch overhead (s); optionally ``host_dispatch``, the host's time to issue one
  op by op type (s, ``"*"`` for the others; measured by ``python -m
  calibration.bench_dispatch``), which makes the simulator model each device's host;
- the interconnect: devices per node, and link bandwidth (bytes/s, the per-device "bus
  bandwidth" of NCCL's tests) and latency (s per step) by group size, within a node and
  across nodes; optionally ``overlap_slowdown``, the compute time lost per second of an
  asynchronous collective running beside it (0 if absent: a free overlap; measured by
  ``python -m calibration.overlap``), and ``overlap_comm_slowdown``, the time a collective
  loses per second of bandwidth-bound compute beside it (0 if absent; measured by
  ``python -m calibration.overlap --memory --ratio 0.4``, see ``bandwidth_bound``);
- optionally ``base``, another profile's name: the file then lists only what differs
  from it (``device``, ``interconnect`` and ``fits`` keys, ``name``, ``description``);
- optionally, for machines of several nodes: ``nodes`` (how many; absent: any number, a
  program's device ``d`` being on node ``d // devices_per_node``) and ``nics_per_node``
  (the network adapters of a node; then ``inter_node`` gives one adapter's bandwidth per
  direction and its latency per step, and a collective spanning nodes is a ring whose
  node-crossing links share the adapters: see ``Hardware.comm_time``). Without
  ``nics_per_node``, ``inter_node`` is the per-device bus bandwidth of a collective
  spanning nodes, whatever its shape;
- optionally, fitted regressions per op family (``fits``): ``matmul`` by dtype (features
  ``m``, ``n``, ``k``, ``flops``, ``bytes``), ``bmm`` by dtype (batched products whose two
  operands are both batched, as attention runs them: ``bmm_features``), ``elementwise``
  (feature ``bytes``), ``matmul_tn`` and ``matmul_nt`` by dtype (products with an operand
  read transposed, as a weight's gradient runs them: ``layout_matmul_time``), ``bmm_nt``
  and ``bmm_tn`` by dtype (their batched forms: ``layout_bmm_time``),
  ``scatter_add_repeated`` by dtype (``scatter_features``), the kernels ``softmax``,
  ``layernorm``, ``gelu`` and ``copy`` (a permuted tensor made contiguous) under ``any``
  (feature ``bytes``), and each collective (``allreduce``, ``allgather``,
  ``reduce_scatter``, ``broadcast``, ``send``, ...) by group size (feature ``bytes``). A
  fitted family replaces the analytic formula for it; a profile without ``bmm`` folds
  batches into ``m`` of the ``matmul`` model, one without ``matmul_tn`` / ``matmul_nt``
  (``bmm_nt`` / ``bmm_tn``) prices those products by ``matmul`` (``bmm``), one without a
  kernel family uses ``elementwise`` (``copy``: costs nothing, a view).

Profiles are found by name in ``calibration/profiles/NAME.json`` beside the ``distir``
package (the repository checkout, or site-packages where both are installed), in the
folders of ``$DISTIR_PROFILE_PATH``, or by a path to a ``.json`` file. ``distir`` reads the
files; it never imports the ``calibration`` package. A profile is parsed once per process,
and once per file version across processes: the validated ``Hardware`` is pickled in the
user's cache folder (``cache_dir()``) and later loads read that. A boosted fit's trees are
held as byte arrays (``Trees``) and decoded on the fit's first evaluation, so a load costs
no more than reading the file and a process decodes only the fits its cost rules use.

All times are seconds, sizes bytes, rates per second. ``Hardware`` and ``FitModel`` are
frozen and hashable: cost rules are memoized per profile.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import pickle
import sys
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from itertools import chain, combinations_with_replacement, repeat
from operator import add, itemgetter, sub
from pathlib import Path
from typing import Any, cast, overload

from distir.errors import ConfigError, Loc
from distir.ir.schemas import FOLDED_COLLECTIVES

__all__ = ["FORMAT", "COLLECTIVES", "FitModel", "Trees", "LinkSpec", "Hardware", "load_hardware",
           "profile_dirs", "available_profiles", "cache_dir", "collective_factors", "loglog_terms",
           "matmul_features", "bmm_features", "scatter_features", "rowwise_features",
           "concat_features", "broadcast_features",
           "KERNEL_FAMILIES"]

FORMAT = "distir-hardware/1"

FIT_KINDS = ("linear", "loglog", "piecewise", "boosted")

Node = tuple[int, float, int, int, float]
"""A regression-tree node ``(feature, threshold, left, right, value)``; a leaf has feature
-1 and its value; an inner node sends ``log x[feature] <= threshold`` left."""


_TreeLists = tuple[list[int], list[int], list[float], list[int], list[int], list[float]]
"""``Trees.lists()``: ``(roots, feature, threshold, left, right, value)``."""


class Trees(Sequence[tuple[Node, ...]]):
    """The regression trees of a ``boosted`` fit, stored compactly: one byte string holding
    the nodes of all trees as arrays, a field per array (``threshold`` and ``value`` as
    float64, then the root of each tree, ``feature``, ``left`` and ``right`` as int32, child
    indices counted from the first tree's root; native byte order). Immutable; equal to,
    and hashed as, the tuple of node tuples it holds (``tuple(trees)``, each node
    ``(feature, threshold, left, right, value)`` with indices within its tree).

    Why: a calibrated profile holds tens of thousands of nodes. As tuples they pickle as
    that many Python objects (16 ms to unpickle ``h100-sxm``); as one byte string a fit
    unpickles in microseconds. The Python lists that evaluation walks (``lists``) are
    built on a fit's first evaluation, so the fits no cost rule asks for are never
    decoded."""

    __slots__ = ("_blob", "_num_trees", "_lists", "_hash")

    def __init__(self, trees: Iterable[Sequence[Any]] = ()) -> None:
        roots: list[int] = []
        base: list[int] = []  # each node's tree's root
        nodes: list[Sequence[Any]] = []
        for tree in trees:
            roots.append(len(nodes))
            nodes.extend(tree)
            base.extend(repeat(roots[-1], len(nodes) - roots[-1]))
        if set(map(len, nodes)) - {5}:
            raise ValueError("a tree node is (feature, threshold, left, right, value)")
        f, thr, lo, hi, v = (list(map(itemgetter(k), nodes)) for k in range(5))
        try:  # ``array`` converts and checks: an int field given 1.5 is a TypeError
            arrays = (array("d", thr), array("d", v), array("i", roots), array("i", f),
                      array("i", map(add, lo, base)), array("i", map(add, hi, base)))
        except OverflowError as e:
            raise ValueError(f"a tree node index is out of range ({e})") from None
        self._set(b"".join(a.tobytes() for a in arrays), len(roots))

    def _set(self, blob: bytes, num_trees: int) -> None:
        self._blob = blob
        self._num_trees = num_trees
        self._lists: _TreeLists | None = None
        self._hash: int | None = None

    @property
    def num_nodes(self) -> int:
        return (len(self._blob) - 4 * self._num_trees) // 28

    def lists(self) -> _TreeLists:
        """``(roots, feature, threshold, left, right, value)`` as Python lists, indices
        global (``feature[roots[t]]`` is tree ``t``'s root); built on the first call."""
        got = self._lists
        if got is None:
            roots, feature, left, right = self._structure()
            mv, n = memoryview(self._blob), self.num_nodes
            threshold = cast(list[float], mv[:8 * n].cast("d").tolist())
            value = cast(list[float], mv[8 * n:16 * n].cast("d").tolist())
            got = self._lists = (roots, feature, threshold, left, right, value)
        return got

    def _structure(self) -> tuple[list[int], list[int], list[int], list[int]]:
        """``(roots, feature, left, right)`` of ``lists``, without decoding the floats or
        keeping the lists when ``lists`` was not built (what validation reads)."""
        if self._lists is not None:
            roots, feature, _, left, right, _ = self._lists
            return roots, feature, left, right
        n, t = self.num_nodes, self._num_trees
        mv = memoryview(self._blob)
        ints = 16 * n + 4 * t  # where the int32 arrays after ``roots`` begin
        return (mv[16 * n:ints].cast("i").tolist(), mv[ints:ints + 4 * n].cast("i").tolist(),
                mv[ints + 4 * n:ints + 8 * n].cast("i").tolist(),
                mv[ints + 8 * n:].cast("i").tolist())

    @property
    def decoded(self) -> bool:
        """Whether ``lists`` has been built (the fit was evaluated, printed or compared)."""
        return self._lists is not None

    def _bounds(self, t: int) -> tuple[int, int]:
        roots = self.lists()[0]
        return roots[t], roots[t + 1] if t + 1 < len(roots) else len(self.lists()[1])

    def __len__(self) -> int:
        return self._num_trees

    def __iter__(self) -> Iterator[tuple[Node, ...]]:
        return (self[t] for t in range(len(self)))

    @overload
    def __getitem__(self, t: int) -> tuple[Node, ...]: ...

    @overload
    def __getitem__(self, t: slice) -> tuple[tuple[Node, ...], ...]: ...

    def __getitem__(self, t: int | slice) -> Any:
        if isinstance(t, slice):
            return tuple(self[i] for i in range(len(self))[t])
        return tuple(self._nodes(range(len(self))[t]))

    def _nodes(self, t: int) -> Iterator[Node]:
        """Tree ``t``'s nodes, indices within the tree."""
        s, e = self._bounds(t)
        _, feature, threshold, left, right, value = self.lists()
        return zip(feature[s:e], threshold[s:e], map(sub, left[s:e], repeat(s)),
                   map(sub, right[s:e], repeat(s)), value[s:e])

    def to_json(self) -> list[list[list[float]]]:
        """The trees as JSON lists (``FitModel.to_json``)."""
        roots, feature, threshold, left, right, value = self.lists()
        ends = [*roots[1:], len(feature)]
        base = list(chain.from_iterable(map(repeat, roots, map(sub, ends, roots))))
        nodes = list(map(list, zip(feature, threshold, map(sub, left, base),
                                   map(sub, right, base), value)))
        return [nodes[s:e] for s, e in zip(roots, ends)]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Trees):
            # the bytes decide unless a float differs only in bits (0.0 and -0.0)
            return self._blob == other._blob or (self._num_trees == other._num_trees
                                                 and self.lists() == other.lists())
        if isinstance(other, tuple):
            return tuple(self) == other
        return NotImplemented

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(tuple(self))
        return self._hash

    def __repr__(self) -> str:
        return f"Trees({len(self)} trees, {self.num_nodes} nodes)"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_trees_from_blob, (self._blob, self._num_trees))


def _trees_from_blob(blob: bytes, num_trees: int) -> Trees:
    """Unpickle a ``Trees`` (the compiled profile cache, written by this very module)."""
    t = Trees.__new__(Trees)
    t._set(blob, num_trees)
    return t


@dataclass(frozen=True, slots=True)
class FitModel:
    """A fitted time model ``t(features)`` in seconds; one of four kinds.

    - ``linear``: ``t = intercept + sum(coef[i] * x[i])``.
    - ``loglog``: ``log t = intercept + sum(coef[j] * term[j])``, the terms being every
      monomial of degree 1..``degree`` in ``log x`` (in ``combinations_with_replacement``
      order, the order of scikit-learn's ``PolynomialFeatures``). Each feature is clamped
      to its calibrated range ``[lo, hi]``; above ``hi`` the time grows in proportion to
      ``x / hi`` (features are extensive: sizes, FLOPs, bytes), below ``lo`` it stays.
    - ``piecewise``: one feature; ``t`` is interpolated linearly in log-log space between
      the knots ``(xs, ts)``; constant below the first knot, proportional to ``x`` beyond
      the last.
    - ``boosted``: a ``linear`` base times a learned correction,
      ``t = base(x) * exp(sum(tree(log x[tree_features]) for tree in trees))``: gradient
      boosted regression trees on the logarithm of the residual (the learning rate is
      folded into the leaf values). Outside the calibrated range the trees' corrections
      stay constant, so the base sets how time scales. ``trees`` may be given as any
      sequence of sequences of nodes; it is stored as ``Trees``.

    ``domain`` (optional, any kind): ``(feature, lo, hi)`` for the features the
    calibration varied, their smallest and largest measured values (``calibration.fit``
    records them for the product families). ``below(x)`` says whether ``x`` lies below
    the smallest sizes measured: there a fit of one layout of a product extrapolates, and
    the profile's general product fit, measured down there, prices it instead
    (``Hardware.layout_matmul_time``).
    """

    kind: str
    features: tuple[str, ...]
    intercept: float = 0.0
    coef: tuple[float, ...] = ()
    degree: int = 1
    lo: tuple[float, ...] = ()
    hi: tuple[float, ...] = ()
    xs: tuple[float, ...] = ()
    ts: tuple[float, ...] = ()
    tree_features: tuple[str, ...] = ()
    trees: Sequence[tuple[Node, ...]] = ()
    domain: tuple[tuple[str, float, float], ...] = ()
    _memo: dict[tuple[float, ...], float] = field(default_factory=dict, compare=False,
                                                  hash=False, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in FIT_KINDS:
            raise ConfigError(f"fit kind '{self.kind}' is not one of {', '.join(FIT_KINDS)}")
        if self.kind in ("linear", "boosted") and len(self.coef) != len(self.features):
            raise ConfigError(f"a {self.kind} fit needs one coefficient per feature")
        trees = self.trees
        if not isinstance(trees, Trees):
            try:
                trees = Trees(trees)
            except (TypeError, ValueError) as err:
                raise ConfigError(f"a fit has malformed trees ({err})") from None
            object.__setattr__(self, "trees", trees)
        if self.kind == "boosted":
            n = len(self.tree_features)
            roots, feature, left, right = trees._structure()
            for s, e in zip(roots, [*roots[1:], len(feature)]):
                if s == e:
                    raise ConfigError("a boosted fit has an empty tree")
                for f, lo, hi in zip(feature[s:e], left[s:e], right[s:e]):
                    if f >= n or (f >= 0 and not (s <= lo < e and s <= hi < e)):
                        raise ConfigError("a boosted fit has a malformed tree node")
        if any(len(d) != 3 or not d[1] <= d[2] for d in self.domain):
            raise ConfigError("a fit's domain maps each feature to [lo, hi] with lo <= hi")
        if self.kind == "loglog":
            if len(self.coef) != len(_monomials(len(self.features), self.degree)):
                raise ConfigError(f"a degree-{self.degree} loglog fit of "
                                  f"{len(self.features)} features needs "
                                  f"{len(_monomials(len(self.features), self.degree))} "
                                  "coefficients")
            if len(self.lo) != len(self.features) or len(self.hi) != len(self.features):
                raise ConfigError("a loglog fit needs lo and hi for every feature")
        if self.kind == "piecewise":
            if len(self.features) != 1 or len(self.xs) != len(self.ts) or not self.xs:
                raise ConfigError("a piecewise fit needs one feature and knots xs, ts of "
                                  "equal length")
            if any(b <= a for a, b in zip(self.xs, self.xs[1:])):
                raise ConfigError("the knots xs of a piecewise fit must increase")
            if any(x <= 0 for x in self.xs) or any(t <= 0 for t in self.ts):
                raise ConfigError("the knots of a piecewise fit must be positive")

    def __call__(self, x: Mapping[str, float]) -> float:
        """The predicted time (s) for the features ``x`` (a mapping by feature name),
        memoized by their values (equal shapes on many devices evaluate a model once)."""
        key = tuple(x[f] for f in self.features) + tuple(x[f] for f in self.tree_features)
        t = self._memo.get(key)
        if t is None:
            t = self._memo[key] = self._eval(x)
        return t

    def _eval(self, x: Mapping[str, float]) -> float:
        vals = [float(x[f]) for f in self.features]
        kind = self.kind
        if kind == "linear":
            return self.intercept + sum(c * v for c, v in zip(self.coef, vals))
        if kind == "boosted":
            base = max(self.intercept + sum(c * v for c, v in zip(self.coef, vals)), 1e-12)
            z = [math.log(max(float(x[f]), 1e-30)) for f in self.tree_features]
            roots, feature, threshold, left, right, value = cast(Trees, self.trees).lists()
            corr = 0.0
            for i in roots:
                f = feature[i]
                while f >= 0:
                    i = left[i] if z[f] <= threshold[i] else right[i]
                    f = feature[i]
                corr += value[i]
            return base * math.exp(corr)
        if kind == "loglog":
            scale = 1.0
            logs = []
            for v, lo, hi in zip(vals, self.lo, self.hi):
                if v > hi:
                    scale *= v / hi
                    v = hi
                elif v < lo:
                    v = lo
                logs.append(math.log(max(v, 1e-30)))
            y = self.intercept
            for c, idx in zip(self.coef, _monomials(len(logs), self.degree)):
                term = 1.0
                for i in idx:
                    term *= logs[i]
                y += c * term
            return math.exp(y) * scale
        v = vals[0]
        xs, ts = self.xs, self.ts
        if v <= xs[0]:
            return ts[0]
        if v >= xs[-1]:
            return ts[-1] * v / xs[-1]
        lo, hi = 0, len(xs) - 1
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if xs[mid] <= v:
                lo = mid
            else:
                hi = mid
        frac = (math.log(v) - math.log(xs[lo])) / (math.log(xs[hi]) - math.log(xs[lo]))
        return math.exp(math.log(ts[lo]) + frac * (math.log(ts[hi]) - math.log(ts[lo])))

    def below(self, x: Mapping[str, float]) -> bool:
        """Whether ``x`` lies below the domain's smallest measured value of a feature."""
        return any(f in x and x[f] < lo for f, lo, _ in self.domain)

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind, "features": list(self.features)}
        if self.domain:
            d["domain"] = {f: [lo, hi] for f, lo, hi in self.domain}
        if self.kind == "piecewise":
            d.update(xs=list(self.xs), ts=list(self.ts))
            return d
        d.update(intercept=self.intercept, coef=list(self.coef))
        if self.kind == "boosted":
            d.update(tree_features=list(self.tree_features),
                     trees=cast(Trees, self.trees).to_json())
        if self.kind == "loglog":
            d.update(degree=self.degree, lo=list(self.lo), hi=list(self.hi))
        return d

    @staticmethod
    def from_json(d: Mapping[str, Any], where: str = "fit") -> FitModel:
        try:
            return FitModel(
                kind=str(d["kind"]), features=tuple(d["features"]),
                intercept=float(d.get("intercept", 0.0)),
                coef=tuple(float(c) for c in d.get("coef", ())),
                degree=int(d.get("degree", 1)),
                lo=tuple(float(v) for v in d.get("lo", ())),
                hi=tuple(float(v) for v in d.get("hi", ())),
                xs=tuple(float(v) for v in d.get("xs", ())),
                ts=tuple(float(v) for v in d.get("ts", ())),
                tree_features=tuple(d.get("tree_features", ())),
                trees=Trees(d.get("trees", ())),
                domain=tuple((str(f), float(v[0]), float(v[1]))
                             for f, v in dict(d.get("domain", {})).items()))
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"{where}: malformed fit ({type(e).__name__}: {e}); see "
                              "calibration/README.md for the format") from None


def matmul_features(m: int, n: int, k: int, itemsize: int) -> dict[str, float]:
    """The features a matmul fit may use: the dimensions, ``flops`` (2mnk), ``bytes``
    (operands and result), and the element counts ``mn`` (result), ``mk`` and ``kn``
    (operands)."""
    return {"m": float(m), "n": float(n), "k": float(k), "flops": 2.0 * m * n * k,
            "bytes": float((m * k + k * n + m * n) * itemsize), "mn": float(m * n),
            "mk": float(m * k), "kn": float(k * n)}


def scatter_features(rows: int, width: int, table: int, nbytes: float) -> dict[str, float]:
    """The features a ``scatter_add_repeated`` fit may use: ``rows`` updates of ``width``
    elements added into a ``table x width`` table, ``updates`` (``rows * width`` elements)
    and ``bytes`` (every input and result, as the cost rules count them)."""
    return {"rows": float(rows), "width": float(width), "table": float(table),
            "updates": float(rows * width), "bytes": float(nbytes)}


def rowwise_features(nbytes: float, width: int, inner: int = 1,
                     run: int | None = None) -> dict[str, float]:
    """The features a ``layernorm``, ``layernorm_grad``, ``reduce``, ``copy`` or ``pad`` fit
    may use: ``bytes`` (every input and result), ``width`` (a normalized row's length; the
    elements a reduction keeps; a copy's result's last axis; a pad's rows' length) and
    ``inner`` (the reduced elements after a reduction's last kept axis: 1 for rows reduced
    over the leading axes, the pixels of an ``[N, C, H, W]`` tensor reduced to ``[C]``; a
    copy's input's last axis); ``rows``, the bytes per kept element (a reduction's reduced
    rows times the element size: PyTorch's column sum splits its rows among blocks only
    from about 1,024 of them, whatever the width); ``run``, a reduction's kept elements
    innermost in memory (``width`` but where reduced axes lie between kept ones: a
    per-head bias's gradient, ``[N, heads, tokens, head width]`` summed to ``[heads, head
    width]``, keeps runs of the head width)."""
    w, i = float(max(width, 1)), float(max(inner, 1))
    return {"bytes": float(nbytes), "width": w, "inner": i, "rows": float(nbytes) / (w * i),
            "run": w if run is None else float(max(run, 1))}


def broadcast_features(nbytes: float, where: bool) -> dict[str, float]:
    """The features an ``elementwise_bcast`` fit may use: ``bytes`` (every input and
    result) and ``where`` (2 for a ``Where`` with a broadcast operand, as
    ``calibration.bench_broadcast``'s ``where_mask`` pattern measures one with a broadcast
    mask; 1 for arithmetic with a broadcast operand, its other patterns)."""
    return {"bytes": float(nbytes), "where": 2.0 if where else 1.0}


def concat_features(nbytes: float, rows: int, width: int, inner: int, parts: int,
                    aligned: bool, contiguous: bool = True, rank: int = 3) -> dict[str, float]:
    """The features a ``concat`` fit may use: ``bytes`` (every input and result), the
    result's ``rows`` (elements before the axis), ``width`` (its length along the axis),
    ``inner`` (elements after it), ``parts`` (the inputs), ``aligned`` (2 where every
    part's slice of a row, ``length x inner`` elements, is a multiple of 16 bytes, else 1:
    PyTorch's ``cat`` copies aligned slices by vector loads) and ``contiguous`` (2 where
    every part is contiguous, else 1: a view, such as a zero row expanded from a scalar,
    sends ``cat`` to its element-by-element kernel) and ``rank`` (the result's: that
    kernel computes each element's offset along every axis)."""
    return {"bytes": float(nbytes), "rows": float(max(rows, 1)), "width": float(max(width, 1)),
            "inner": float(max(inner, 1)), "parts": float(max(parts, 1)),
            "aligned": 2.0 if aligned else 1.0, "contiguous": 2.0 if contiguous else 1.0,
            "rank": float(max(rank, 1))}


def bmm_features(batch: int, m: int, n: int, k: int, itemsize: int) -> dict[str, float]:
    """The features a ``bmm`` fit may use: ``batch`` products of ``(m x k) @ (k x n)``, both
    operands batched; ``m``, ``n``, ``k`` per product, ``flops``, ``bytes``, ``mn``, ``mk``
    and ``kn`` totals over the batch (so that a linear model is one of total work)."""
    return {"batch": float(batch), "m": float(m), "n": float(n), "k": float(k),
            "flops": 2.0 * batch * m * n * k,
            "bytes": float(batch * (m * k + k * n + m * n) * itemsize),
            "mn": float(batch * m * n), "mk": float(batch * m * k),
            "kn": float(batch * k * n)}


KERNEL_FAMILIES = ("softmax", "layernorm", "gelu", "copy", "elementwise_bcast")
"""Memory-bound kernel families a profile may fit apart from ``elementwise`` (feature
``bytes`` read and written), keyed by dtype (profiles before per-dtype fits key them
``any``): half-precision kernels of these families move fewer bytes per second than
float32 ones (strided or per-element paths), so a pooled fit by bytes under-charges them."""

_KERNEL_KEYS = {"Float16": ("Float16", "BFloat16", "any", "Float32"),
                "BFloat16": ("BFloat16", "Float16", "any", "Float32")}
"""The fit keys tried, in order, for a kernel of a dtype (the same-width dtype next)."""


_MONO: dict[tuple[int, int], tuple[tuple[int, ...], ...]] = {}


def _monomials(n: int, degree: int) -> tuple[tuple[int, ...], ...]:
    """Index tuples of the monomials of degree 1..degree in n variables."""
    key = (n, degree)
    m = _MONO.get(key)
    if m is None:
        m = _MONO[key] = tuple(idx for d in range(1, degree + 1)
                               for idx in combinations_with_replacement(range(n), d))
    return m


def loglog_terms(logs: Sequence[float], degree: int) -> list[float]:
    """The regression terms of a ``loglog`` fit for feature logarithms ``logs`` (used by
    the calibration to build its design matrix in exactly the evaluation order)."""
    out = []
    for idx in _monomials(len(logs), degree):
        t = 1.0
        for i in idx:
            t *= logs[i]
        out.append(t)
    return out


@dataclass(frozen=True, slots=True)
class LinkSpec:
    """Links for collectives of ``group_size`` devices (and larger, up to the next entry):
    ``bandwidth`` in bytes/s per device (bus bandwidth), ``latency`` in s per step."""

    group_size: int
    bandwidth: float
    latency: float


def collective_factors(kind: str, n: int) -> tuple[float, float]:
    """``(steps, volume)`` of the alpha-beta model of a collective over ``n`` devices:
    ``t = steps * latency + volume * bytes / bandwidth``, ``bytes`` being the largest
    per-device buffer (the whole tensor for allreduce, broadcast, send and reduce; the
    concatenation for allgather and gather; the unsplit input for reduce-scatter and
    scatter). Ring algorithms, as NCCL uses for large messages."""
    if n <= 1:
        return 0.0, 0.0
    f = (n - 1) / n
    if kind == "allreduce":
        return 2.0 * (n - 1), 2.0 * f
    if kind in ("allgather", "reduce_scatter", "scatter", "gather"):
        return float(n - 1), f
    if kind in ("broadcast", "reduce"):
        return float(n - 1), 1.0
    if kind == "send":
        return 1.0, 1.0
    raise ConfigError(f"unknown collective '{kind}'")


COLLECTIVES = ("allreduce", "allgather", "reduce_scatter", "broadcast", "scatter", "gather",
               "reduce", "send")


@dataclass(frozen=True, slots=True)
class Hardware:
    """A hardware profile (see the module docstring). Frozen and hashable (by name, source
    and values), so cost rules can be memoized per profile."""

    name: str
    memory_bytes: int
    peak_flops: tuple[tuple[str, float], ...]
    memory_bandwidth: float
    launch_overhead: float
    devices_per_node: int
    intra_node: tuple[LinkSpec, ...]
    inter_node: tuple[LinkSpec, ...]
    fits: tuple[tuple[str, str, FitModel], ...] = ()
    description: str = ""
    calibrated: bool = False
    source: str = ""
    overlap_slowdown: float = 0.0
    overlap_comm_slowdown: float = 0.0
    """Seconds an asynchronous collective is stretched per second of bandwidth-bound
    compute (``bandwidth_bound``) that runs beside it on one of its devices (0: the
    collective keeps its time alone); see docs/simulation.md."""
    nodes: int = 0
    """How many nodes the machine has; 0: any number (a program's devices decide)."""
    nics_per_node: int = 0
    """Network adapters per node; 0: ``inter_node`` is a bus bandwidth (module docstring)."""
    reserved_bytes: int = 0
    """Device memory a run's tensors cannot use (the CUDA context, library handles,
    communicator buffers), measured by ``python -m calibration.memory_overhead``; a program
    fits when its peak is at most ``usable_memory_bytes``."""
    outside_allocator: tuple[int, ...] = ()
    """What a rank holds outside the allocator, by the communicators it joins (``()``: the
    constant ``reserved_bytes``): ``(single, world, communicator)``, the bytes of a rank
    in a world of one (CUDA context, library handles, its communicator), of a rank of a
    larger world with the world's communicator alone, and of each further communicator it
    joins; measured by ``python -m calibration.memory_overhead``. See ``reserved_for``."""
    workspace_bytes: int = 0
    """Bytes the math libraries' workspaces hold inside the allocator, per stream that runs
    products: cuBLAS's 32 MiB and cuBLASLt's 1 MiB, allocated by a device's first product
    and never freed (measured by ``grid_search/results/norms_views/workspace_probe.py`` on
    an H200, torch 2.11). A step replayed as a CUDA graph holds two sets, the eager
    warm-up's and the capture stream's (``workspace_copies``). Added to every device's
    liveness peak in ``Simulation.held_bytes``, which decides what fits. The H100
    profiles carry the H200's figure (the same sm_90 defaults), not measured there."""
    workspace_copies: int = 1
    """How many sets of ``workspace_bytes`` a device holds (2 for ``for_cuda_graphs``)."""
    sm_count: int = 0
    """A device's streaming multiprocessors (132 on an H100 or H200 SXM); 0: not given. A
    reduction's kernel sizes the staging buffer it allocates while it runs by them
    (``memory.reduce_staging_bytes``, counted at its op where this is given)."""
    host_dispatch: tuple[tuple[str, float], ...] = ()
    """Seconds the host spends issuing one op, by op type (``"*"``: any other type),
    measured by ``python -m calibration.bench_dispatch``; empty: the host is not modelled
    (it always keeps ahead of the device). See ``host_seconds``."""
    _peak: dict[str, float] = field(default_factory=dict, compare=False, hash=False,
                                    repr=False)
    _fits: dict[tuple[str, str], FitModel] = field(default_factory=dict, compare=False,
                                                   hash=False, repr=False)
    _host: dict[str, float] = field(default_factory=dict, compare=False, hash=False,
                                    repr=False)

    def __post_init__(self) -> None:
        if self.sm_count < 0:
            raise ConfigError(f"profile {self.name}: device.sm_count must be >= 0")
        if self.workspace_bytes < 0 or self.workspace_copies < 1:
            raise ConfigError(f"profile {self.name}: device.workspace_bytes must be >= 0 "
                              "and device.workspace_copies >= 1")
        if self.outside_allocator and (len(self.outside_allocator) != 3 or
                                       min(self.outside_allocator) < 0):
            raise ConfigError(f"profile {self.name}: outside_allocator is (single, world, "
                              "communicator), three byte counts >= 0")
        self._peak.update(self.peak_flops)
        self._host.update(self.host_dispatch)
        if any(not (x >= 0.0) for _, x in self.host_dispatch):
            raise ConfigError(f"profile {self.name}: device.host_dispatch times must be "
                              "seconds >= 0")
        if not (self.overlap_comm_slowdown >= 0.0):
            raise ConfigError(f"profile {self.name}: interconnect.overlap_comm_slowdown must "
                              f"be >= 0, got {self.overlap_comm_slowdown}")
        self._fits.update({(fam, key): m for fam, key, m in self.fits})
        if not self.intra_node:
            raise ConfigError(f"profile {self.name}: interconnect.intra_node needs an entry")
        if self.nodes < 0 or self.nics_per_node < 0 or (self.nics_per_node
                                                         and not self.inter_node):
            raise ConfigError(f"profile {self.name}: interconnect.nodes and nics_per_node "
                              "must be >= 0, and nics_per_node needs inter_node links")

    @property
    def num_devices(self) -> int | None:
        """The machine's device count (``nodes`` x ``devices_per_node``); ``None`` when
        the profile fixes no node count."""
        return self.nodes * self.devices_per_node if self.nodes else None

    @property
    def usable_memory_bytes(self) -> int:
        """What a device offers a program's tensors: the capacity less ``reserved_bytes``."""
        return self.memory_bytes - self.reserved_bytes

    def reserved_for(self, world_size: int, communicators: int) -> int:
        """Bytes outside the allocator on a rank of a ``world_size``-rank run that joins
        ``communicators`` communicators besides the world's (the backend makes one per
        device group a program communicates in): ``outside_allocator``'s model, else the
        constant ``reserved_bytes``."""
        if not self.outside_allocator:
            return self.reserved_bytes
        single, world, per = self.outside_allocator
        return (single if world_size <= 1 else world) + per * communicators

    def for_cuda_graphs(self) -> Hardware:
        """This profile for steps replayed as CUDA graphs (``distir run --cuda-graph``): the
        host launches one graph a step instead of issuing each op, so its dispatch is not
        modelled (``host_dispatch`` dropped), and the capture stream holds a second set of
        the libraries' workspaces (``workspace_copies`` 2); everything else alike."""
        if not self.host_dispatch and (not self.workspace_bytes or
                                       self.workspace_copies == 2):
            return self
        return replace(self, host_dispatch=(), workspace_copies=2,
                       name=f"{self.name}+graph" if self.host_dispatch else self.name,
                       _peak={}, _fits={}, _host={})

    @property
    def workspace_held(self) -> int:
        """The libraries' workspace bytes a device holds (``workspace_bytes`` x
        ``workspace_copies``)."""
        return self.workspace_bytes * self.workspace_copies

    def with_nodes(self, nodes: int) -> Hardware:
        """This profile for a machine of ``nodes`` nodes (everything else alike)."""
        if not isinstance(nodes, int) or nodes < 1:
            raise ConfigError(f"profile {self.name}: a machine has at least 1 node, got "
                              f"{nodes!r}")
        return replace(self, nodes=nodes, name=f"{self.name}@{nodes}", _peak={}, _fits={},
                       _host={})

    # -- compute ---------------------------------------------------------------------
    def peak(self, dtype: str) -> float:
        """Peak FLOP/s for a dtype name; Float32's figure for a dtype the profile lacks."""
        p = self._peak.get(dtype)
        if p is None:
            p = self._peak.get("Float32") or max(self._peak.values())
        return p

    def bandwidth_bound(self, flops: float, nbytes: float, dtype: str) -> bool:
        """Whether a compute kernel of ``flops`` moving ``nbytes`` is bandwidth-bound on
        this device: its memory time at ``memory_bandwidth`` at least its arithmetic time
        at ``peak(dtype)`` (its arithmetic intensity at most the roofline's ridge point).
        An elementwise op, a normalization or an optimizer update is; a large product
        is not."""
        return nbytes > 0 and nbytes * self.peak(dtype) >= flops * self.memory_bandwidth

    @property
    def models_host(self) -> bool:
        """Whether the simulator models each device's host issuing its ops."""
        return bool(self.host_dispatch)

    def host_seconds(self, op_type: str) -> float:
        """The host's time to issue one op of ``op_type``: its measured figure, else the
        profile's ``"*"``, else 0. A collective of a program that writes one of several
        identical copies is issued as the collective it stands for (``FOLDED_COLLECTIVES``)."""
        h = self._host.get(FOLDED_COLLECTIVES.get(op_type, op_type))
        return self._host.get("*", 0.0) if h is None else h

    def fit(self, family: str, key: str) -> FitModel | None:
        return self._fits.get((family, key))

    def roofline_time(self, flops: float, nbytes: float, dtype: str) -> float:
        """Launch overhead plus the larger of compute and memory time."""
        return self.launch_overhead + max(flops / self.peak(dtype),
                                          nbytes / self.memory_bandwidth)

    def matmul_time(self, m: int, n: int, k: int, dtype: str, itemsize: int) -> float:
        """An (m x k) @ (k x n) product; batches are folded into ``m`` by the caller.

        A product whose ``n`` or ``k`` (the leading dimensions of row-major operands) is not
        a multiple of 8 uses the ``matmul_unaligned`` fit where the profile has one: such
        products miss the fast tensor-core kernels (an LM head over 50257 tokens runs
        several times slower than over 50304)."""
        flops = 2.0 * m * n * k
        nbytes = float((m * k + k * n + m * n) * itemsize)
        f = None
        if n % 8 or k % 8:
            f = self._fits.get(("matmul_unaligned", dtype))
        if f is None:
            f = self._fits.get(("matmul", dtype))
        if f is not None:
            return max(f(matmul_features(m, n, k, itemsize)), self.launch_overhead)
        return self.roofline_time(flops, nbytes, dtype)

    def bmm_time(self, batch: int, m: int, n: int, k: int, dtype: str,
                 itemsize: int) -> float:
        """``batch`` products ``(m x k) @ (k x n)`` with both operands batched (one batched
        kernel): the ``bmm`` fit of the dtype, else one product with the batches folded
        into ``m`` (``matmul_time``)."""
        f = self._fits.get(("bmm", dtype))
        if f is not None:
            return max(f(bmm_features(batch, m, n, k, itemsize)), self.launch_overhead)
        return self.matmul_time(batch * m, n, k, dtype, itemsize)

    def layout_matmul_time(self, layout: str, m: int, n: int, k: int, dtype: str,
                           itemsize: int) -> float:
        """An (m x k) @ (k x n) product with an operand read transposed, as the backend runs
        a weight's gradient: ``layout`` ``matmul_tn`` (``a.t() @ dy``, the reduction ``k``
        over the rows of a batch) or ``matmul_nt`` (``dy @ b.t()``, ``x @ w.t()``). The
        profile's fit of that family for ``dtype`` (measured on aligned and unaligned shapes
        alike, ``calibration/bench_matmul_grad.py``), else ``matmul_time``; also
        ``matmul_time`` below the smallest sizes the family's fit was measured at
        (``FitModel.below``: a pipeline microbatch's few rows)."""
        f = self._fits.get((layout, dtype))
        if f is not None:
            x = matmul_features(m, n, k, itemsize)
            if not f.below(x):  # else not measured that small: the general fit
                return max(f(x), self.launch_overhead)
        return self.matmul_time(m, n, k, dtype, itemsize)

    def layout_bmm_time(self, layout: str, batch: int, m: int, n: int, k: int, dtype: str,
                        itemsize: int) -> float:
        """``batch`` products ``(m x k) @ (k x n)``, both operands batched, one read
        transposed, as ``MatMulGrad``'s general lowering runs an attention's gradient:
        ``layout`` ``bmm_nt`` (``torch.matmul(dy, b.mT)``) or ``bmm_tn``
        (``torch.matmul(a.mT, dy)``). The profile's fit of that family for ``dtype``
        (``calibration/bench_matmul_grad.py``), else ``bmm_time``."""
        f = self._fits.get((layout, dtype))
        if f is None:
            return self.bmm_time(batch, m, n, k, dtype, itemsize)
        return max(f(bmm_features(batch, m, n, k, itemsize)), self.launch_overhead)

    def fitted_kernel_time(self, family: str, dtype: str,
                           features: Mapping[str, float]) -> float | None:
        """A kernel of ``family`` by its fit for ``dtype`` (``_kernel_fit``'s order: the
        dtype's own, the same-width one's, ``any``, Float32's) on named ``features``,
        floored at ``launch_overhead``; ``None`` without a fit."""
        f = self._kernel_fit(family, dtype)
        if f is None:
            return None
        return max(f(features), self.launch_overhead)

    def has_kernel_fit(self, family: str, dtype: str | None = None) -> bool:
        """Whether the profile fits the kernel family (``KERNEL_FAMILIES``): for ``dtype``
        (``_kernel_fit``), or for any dtype."""
        if dtype is not None:
            return self._kernel_fit(family, dtype) is not None
        return any(fam == family for fam, _ in self._fits)

    def _kernel_fit(self, family: str, dtype: str) -> FitModel | None:
        """The fit of ``family`` for ``dtype``: the dtype's own, else the same-width one's,
        else the pooled (``any``) one, else float32's; ``None`` if the profile has none."""
        fits = self._fits
        for key in _KERNEL_KEYS.get(dtype, (dtype, "any", "Float32")):
            f = fits.get((family, key))
            if f is not None:
                return f
        return None

    def kernel_time(self, family: str, nbytes: float, flops: float, dtype: str,
                    features: Mapping[str, float] | None = None) -> float:
        """A memory-bound kernel of a family of ``KERNEL_FAMILIES`` moving ``nbytes`` (read +
        written): its fit for ``dtype`` (``_kernel_fit``), floored as ``memory_time``;
        ``memory_time`` without one. ``features``, where given, are every feature the
        family's fits may use (``bytes`` among them, ``rowwise_features``); a fit reads
        those it was fitted on."""
        f = self._kernel_fit(family, dtype)
        if f is None:
            return self.memory_time(nbytes, flops, dtype)
        t = max(f(features if features is not None else {"bytes": nbytes}),
                self.launch_overhead)
        return max(t, self.launch_overhead + flops / self.peak(dtype))

    def memory_time(self, nbytes: float, flops: float, dtype: str) -> float:
        """A memory-bound kernel moving ``nbytes`` (read + written)."""
        f = self._fits.get(("elementwise", "any"))
        if f is not None:
            t = max(f({"bytes": nbytes}), self.launch_overhead)
            return max(t, self.launch_overhead + flops / self.peak(dtype))
        return self.roofline_time(flops, nbytes, dtype)

    # -- communication ---------------------------------------------------------------
    def link(self, n: int, inter: bool) -> LinkSpec:
        """The link entry for a group of ``n`` devices: the last entry whose group size
        is at most ``n`` (the first entry for smaller groups)."""
        table = self.inter_node if inter and self.inter_node else self.intra_node
        best = table[0]
        for spec in table:
            if spec.group_size <= n:
                best = spec
        return best

    def spans_nodes(self, devices: Sequence[int]) -> bool:
        per = self.devices_per_node
        return len({d // per for d in devices}) > 1

    def comm_time(self, kind: str, nbytes: float, devices: Sequence[int]) -> float:
        """A collective (or ``send``) of ``nbytes`` over ``devices`` (see
        ``collective_factors`` for what ``nbytes`` means). A fitted collective is used
        within a node: for the group size itself, else the nearest fitted one with the
        bytes scaled by the ratio of ring volumes."""
        n = len(devices)
        if n <= 1:
            return 0.0
        inter = self.spans_nodes(devices)
        if not inter:
            f = self._comm_fit(kind, n, nbytes)
            if f is not None:
                return max(f, self.launch_overhead)
        steps, volume = collective_factors(kind, n)
        spec = self.link(n, inter)
        bandwidth = spec.bandwidth
        if inter and self.nics_per_node:
            bandwidth = self._ring_across_nodes(devices, spec.bandwidth)
        return self.launch_overhead + steps * spec.latency + volume * nbytes / bandwidth

    def _ring_across_nodes(self, devices: Sequence[int], nic_bandwidth: float) -> float:
        """Bus bandwidth (bytes/s) of a ring over ``devices`` spanning nodes, with
        ``nics_per_node`` adapters of ``nic_bandwidth`` each: every node-crossing link of
        the ring carries what every device sends, so with ``p`` of the group's devices on
        the busiest node, ``min(p, nics_per_node)`` parallel rings (NCCL's channels, one
        per adapter) share it: ``min(p, nics) * nic_bandwidth``, capped by the intra-node
        link of ``p`` devices. Other groups' traffic on the same adapters is not
        counted (the simulator models no link contention)."""
        per = self.devices_per_node
        count: dict[int, int] = {}
        for d in devices:
            count[d // per] = count.get(d // per, 0) + 1
        p = max(count.values())
        bw = min(p, self.nics_per_node) * nic_bandwidth
        if p > 1:
            bw = min(bw, self.link(p, False).bandwidth)
        return bw

    def _comm_fit(self, kind: str, n: int, nbytes: float) -> float | None:
        f = self._fits.get((kind, str(n)))
        if f is not None:
            return f({"bytes": nbytes})
        sizes = [int(k) for fam, k in self._fits if fam == kind and k.isdigit()]
        if not sizes:
            return None
        g = min(sizes, key=lambda s: (abs(math.log(s) - math.log(n)), s))
        _, vol_n = collective_factors(kind, n)
        _, vol_g = collective_factors(kind, g)
        return self._fits[(kind, str(g))]({"bytes": nbytes * vol_n / vol_g})

    # -- (de)serialization -----------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        fits: dict[str, dict[str, Any]] = {}
        for fam, key, m in self.fits:
            fits.setdefault(fam, {})[key] = m.to_json()
        return {
            "format": FORMAT,
            "name": self.name,
            "description": self.description,
            "calibrated": self.calibrated,
            "device": {
                "memory_bytes": self.memory_bytes,
                **({"reserved_bytes": self.reserved_bytes} if self.reserved_bytes else {}),
                **({"outside_allocator": dict(zip(("single", "world", "communicator"),
                                                  self.outside_allocator))}
                   if self.outside_allocator else {}),
                **({"workspace_bytes": self.workspace_bytes} if self.workspace_bytes else {}),
                **({"workspace_copies": self.workspace_copies} if self.workspace_copies != 1
                   else {}),
                **({"sm_count": self.sm_count} if self.sm_count else {}),
                "peak_flops": dict(self.peak_flops),
                "memory_bandwidth": self.memory_bandwidth,
                "launch_overhead": self.launch_overhead,
                **({"host_dispatch": dict(self.host_dispatch)} if self.host_dispatch
                   else {}),
            },
            "interconnect": {
                "devices_per_node": self.devices_per_node,
                "intra_node": [_link_json(s) for s in self.intra_node],
                "inter_node": [_link_json(s) for s in self.inter_node],
                **({"overlap_slowdown": self.overlap_slowdown} if self.overlap_slowdown
                   else {}),
                **({"overlap_comm_slowdown": self.overlap_comm_slowdown}
                   if self.overlap_comm_slowdown else {}),
                **({"nodes": self.nodes} if self.nodes else {}),
                **({"nics_per_node": self.nics_per_node} if self.nics_per_node else {}),
            },
            "fits": fits,
        }

    @staticmethod
    def from_json(d: Mapping[str, Any], source: str = "<profile>") -> Hardware:
        """Build a profile from its JSON object; a ``ConfigError`` naming ``source`` and the
        missing or malformed field otherwise."""
        if d.get("format") != FORMAT:
            raise ConfigError(f"{source}: not a distir hardware profile (format is "
                              f"{d.get('format')!r}, expected {FORMAT!r})")
        try:
            dev = d["device"]
            net = d["interconnect"]
            fits: list[tuple[str, str, FitModel]] = []
            for fam, by_key in (d.get("fits") or {}).items():
                for key, m in by_key.items():
                    fits.append((fam, str(key), m if isinstance(m, FitModel) else
                                 FitModel.from_json(m, f"{source}: fits.{fam}.{key}")))
            return Hardware(
                name=str(d["name"]),
                description=str(d.get("description", "")),
                calibrated=bool(d.get("calibrated", False)),
                memory_bytes=int(dev["memory_bytes"]),
                reserved_bytes=int(dev.get("reserved_bytes", 0)),
                outside_allocator=_outside(dev.get("outside_allocator"), source),
                workspace_bytes=int(dev.get("workspace_bytes", 0)),
                workspace_copies=int(dev.get("workspace_copies", 1)),
                sm_count=int(dev.get("sm_count", 0)),
                peak_flops=tuple((str(k), float(v)) for k, v in dev["peak_flops"].items()),
                memory_bandwidth=float(dev["memory_bandwidth"]),
                launch_overhead=float(dev["launch_overhead"]),
                host_dispatch=tuple((str(k), float(v)) for k, v in
                                    (dev.get("host_dispatch") or {}).items()),
                devices_per_node=int(net.get("devices_per_node", 1 << 30)),
                intra_node=tuple(_link(x) for x in net["intra_node"]),
                inter_node=tuple(_link(x) for x in net.get("inter_node", ())),
                overlap_slowdown=float(net.get("overlap_slowdown", 0.0)),
                overlap_comm_slowdown=float(net.get("overlap_comm_slowdown", 0.0)),
                nodes=int(net.get("nodes", 0)),
                nics_per_node=int(net.get("nics_per_node", 0)),
                fits=tuple(fits),
                source=source)
        except KeyError as e:
            raise ConfigError(f"{source}: the profile lacks field {e}; see "
                              "calibration/README.md for the format") from None
        except (TypeError, ValueError, AttributeError) as e:
            raise ConfigError(f"{source}: malformed profile ({e}); see "
                              "calibration/README.md for the format") from None


def _link(x: Mapping[str, Any]) -> LinkSpec:
    return LinkSpec(int(x["group_size"]), float(x["bandwidth"]), float(x["latency"]))


def _link_json(s: LinkSpec) -> dict[str, Any]:
    return {"group_size": s.group_size, "bandwidth": s.bandwidth, "latency": s.latency}


def profile_dirs() -> list[Path]:
    """Folders searched for profiles by name: ``$DISTIR_PROFILE_PATH`` (os.pathsep
    separated), then ``calibration/profiles`` beside the ``distir`` package."""
    dirs = [Path(p) for p in os.environ.get("DISTIR_PROFILE_PATH", "").split(os.pathsep) if p]
    dirs.append(Path(__file__).resolve().parent.parent.parent / "calibration" / "profiles")
    return dirs


def available_profiles() -> list[str]:
    """The names of the profiles found in ``profile_dirs()``, sorted."""
    names: set[str] = set()
    for d in profile_dirs():
        if d.is_dir():
            names.update(p.stem for p in d.glob("*.json"))
    return sorted(names)


_CACHE: dict[tuple[str, float], Hardware] = {}


def _outside(d: Any, source: str) -> tuple[int, ...]:
    """``device.outside_allocator`` (``{"single", "world", "communicator"}``, bytes)."""
    if d is None:
        return ()
    try:
        out = (int(d["single"]), int(d["world"]), int(d["communicator"]))
    except (KeyError, TypeError, ValueError):
        raise ConfigError(f"{source}: device.outside_allocator needs the integer byte "
                          "counts single, world and communicator") from None
    if min(out) < 0:
        raise ConfigError(f"{source}: device.outside_allocator byte counts must be >= 0")
    return out


def load_hardware(spec: str | os.PathLike[str] | Hardware) -> Hardware:
    """A profile by name (``"h100-sxm"``), by path to a JSON file (gzipped where its name
    ends in ``.json.gz``: results folders keep their profiles so), or as given.

    Unknown names raise a one-line ``ConfigError`` that lists the available ones."""
    if isinstance(spec, Hardware):
        return spec
    s = os.fspath(spec)
    path: Path | None = None
    if s.endswith((".json", ".json.gz")) or os.sep in s or (os.altsep and os.altsep in s):
        path = Path(s)
        if not path.is_file():
            raise ConfigError(f"hardware profile file {s} does not exist")
    else:
        for d in profile_dirs():
            p = d / f"{s}.json"
            if p.is_file():
                path = p
                break
        if path is None:
            avail = ", ".join(available_profiles()) or "none found"
            raise ConfigError(f"unknown hardware profile '{s}'; available: {avail} "
                              "(or give a path to a profile .json file)")
    st = path.stat()
    key = (str(path.resolve()), st.st_mtime_ns)
    hw = _CACHE.get(key)
    if hw is None:
        hw = _CACHE[key] = _load_compiled(path, st) or _parse_profile(path, st)
    return hw


def _parse_profile(path: Path, st: os.stat_result) -> Hardware:
    """Read and validate a profile's JSON, then store the result in the compiled cache."""
    try:
        if path.name.endswith(".gz"):
            import gzip

            with gzip.open(path, "rt", encoding="utf-8") as f:
                data = json.load(f)
        else:
            data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ConfigError(f"invalid JSON in hardware profile: {e.msg}",
                          Loc(str(path), e.lineno, e.colno)) from None
    except (OSError, EOFError, UnicodeDecodeError) as e:  # a damaged .json.gz, or not text
        raise ConfigError(f"{path}: cannot read the hardware profile ({e}); write it "
                          "again") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a hardware profile must be a JSON object")
    if "base" in data:  # not stored compiled: a change to the base must show
        return _derived(data, str(path))
    hw = Hardware.from_json(data, str(path))
    _store_compiled(path, st, hw)
    return hw


_DERIVING: set[str] = set()


def _derived(data: Mapping[str, Any], source: str) -> Hardware:
    """A profile written as changes to another (``"base"``: a profile name, or a path
    relative to this file's folder): its ``device``, ``interconnect`` and ``fits`` keys
    replace the base's, key by key; ``name``, ``description`` and ``calibrated`` replace
    the base's where given."""
    ref = str(data["base"])
    rel = Path(source).parent / ref
    if source in _DERIVING:
        raise ConfigError(f"{source}: its base profiles lead back to it ({ref})")
    _DERIVING.add(source)
    try:
        base = load_hardware(rel if ref.endswith((".json", ".json.gz")) and rel.is_file()
                             else ref)
    finally:
        _DERIVING.discard(source)
    # the base's fits are kept as they are, not printed and parsed again: the rest comes
    # from a copy without fits, with fresh private caches (not the base's dicts)
    caches: dict[str, Any] = {f.name: {} for f in fields(Hardware) if f.name.startswith("_")}
    merged = replace(base, fits=(), **caches).to_json()
    for fam, key, m in base.fits:
        merged["fits"].setdefault(fam, {})[key] = m
    for sec in ("device", "interconnect", "fits"):
        extra = data.get(sec) or {}
        if not isinstance(extra, Mapping):
            raise ConfigError(f"{source}: {sec} must be an object")
        merged[sec] = {**merged[sec], **extra}
    dev = data.get("device") or {}
    if "reserved_bytes" in dev and "outside_allocator" not in dev:
        # A new constant is the derived profile's word on what lies outside the
        # allocator: the base's model by communicator no longer describes it.
        merged["device"].pop("outside_allocator", None)
    for key in ("name", "description", "calibrated"):
        if key in data:
            merged[key] = data[key]
    if data.get("format") != FORMAT:
        merged["format"] = data.get("format")
    return Hardware.from_json(merged, source)


# -- the compiled profile cache ------------------------------------------------------------
# Parsing a calibrated profile (0.5-2 MB of JSON, thousands of fitted trees) costs 15-60 ms;
# unpickling the validated ``Hardware`` 0.5-2.5 ms, its trees being byte strings (``Trees``).
# The pickle lives in the user's cache folder, named by a hash of the profile's resolved
# path, its mtime and size, this module's own mtime (a change to the classes invalidates
# it), the Python version and the byte order. A cache that cannot be read or written is
# skipped silently: it only saves time.


def cache_dir() -> Path | None:
    """The folder of compiled profiles: ``$DISTIR_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/distir``, else ``~/.cache/distir``; ``None`` (no cache) when
    ``DISTIR_CACHE_DIR`` is set to the empty string."""
    env = os.environ.get("DISTIR_CACHE_DIR")
    if env is not None:
        return Path(env) if env else None
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) / "distir" if xdg else Path.home() / ".cache" / "distir"


def _compiled_path(path: Path, st: os.stat_result) -> Path | None:
    d = cache_dir()
    if d is None:
        return None
    try:
        me = os.stat(__file__).st_mtime_ns
    except OSError:
        me = 0
    ident = (f"{path.resolve()}|{st.st_mtime_ns}|{st.st_size}|{me}|{sys.version}|"
             f"{sys.byteorder}")  # ``Trees`` are stored in the native byte order
    digest = hashlib.sha256(ident.encode()).hexdigest()[:32]
    return d / f"profile-{path.stem}-{digest}.pickle"


def _load_compiled(path: Path, st: os.stat_result) -> Hardware | None:
    cp = _compiled_path(path, st)
    if cp is None:
        return None
    try:
        with open(cp, "rb") as f:
            hw = pickle.load(f)
    except Exception:  # absent, unreadable or stale: parse the JSON instead
        return None
    return hw if isinstance(hw, Hardware) and hw.source == str(path) else None


def _store_compiled(path: Path, st: os.stat_result, hw: Hardware) -> None:
    cp = _compiled_path(path, st)
    if cp is None:
        return
    try:
        cp.parent.mkdir(parents=True, exist_ok=True)
        tmp = cp.with_name(f"{cp.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            pickle.dump(hw, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, cp)  # atomic: concurrent workers never read a partial file
    except OSError:
        return
    _prune_compiled(cp.parent, path.stem)


KEEP_COMPILED = 8
"""Compiled entries kept per profile name (the newest): each edit of a profile, of this
module or a new Python makes a new one, and the folder would otherwise only grow."""


def _prune_compiled(folder: Path, stem: str) -> None:
    """Delete all but the ``KEEP_COMPILED`` newest compiled entries of profiles named
    ``stem`` (a process that loses a race for one just parses the JSON)."""
    try:
        entries = sorted(folder.glob(f"profile-{stem}-*.pickle"),
                         key=lambda p: p.stat().st_mtime_ns, reverse=True)
        for old in entries[KEEP_COMPILED:]:
            old.unlink(missing_ok=True)
    except OSError:
        pass
