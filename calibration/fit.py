"""Fitting: per-family regressions with scikit-learn, chosen by cross-validated error.

For every family and key (``matmul``, ``matmul_unaligned``, ``matmul_tn``, ``matmul_nt``,
``bmm``, ``bmm_nt``, ``bmm_tn`` and ``scatter_add_repeated`` per dtype; ``elementwise`` and
the kernel families ``softmax``, ``layernorm``, ``gelu``, ``copy`` under ``any``; each
collective per group size) the candidate models are fitted on the training rows, 5-fold
cross-validated, and the one with the lowest score wins — the mean of the median absolute
percentage error (APE) over all validation points and over the large ones (matmuls of at
least 1 GFLOP, other kernels and collectives of at least 1 MiB), which dominate a step's
time; it is refitted on all training rows and scored on the held-out rows. The shipped
model is exactly the one scored: predictions go through
``distir.analysis.hardware.FitModel``, the evaluator the simulator uses.

Candidates:
- ``linear``: ``t = a + sum(c_i x_i)`` with ``c_i >= 0``, weighted by ``1 / t^2`` so that the
  least squares are relative; features FLOPs and bytes, or FLOPs and the element counts of
  the result and of each operand (matmul, bmm: totals over the batch), or bytes (the rest).
- ``loglog``: ``log t`` as a polynomial of degree 2 or 3 in ``log m, log n, log k`` (or
  ``log FLOPs, log bytes``), matmul only.
- ``boosted``: the second linear model times ``exp`` of gradient-boosted regression trees
  (150 of depth 3, or 300 of depth 4) on ``log m, log n, log k`` (and ``log mn, log
  FLOPs``) fitted to the log residual: it learns the shape effects (tile and wave
  quantization) that no smooth law has, matmul only; for bmm the same on ``log batch, log m,
  log n, log k``.
- ``piecewise``: ``log t`` piecewise linear in ``log bytes`` (a degree-1 ``SplineTransformer``
  with knots at every, every 2nd or every 4th training size, then ridge regression), for
  elementwise kernels and collectives, whose time bends where protocols and caches change.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from distir.analysis.hardware import (
    FitModel,
    bmm_features,
    broadcast_features,
    concat_features,
    loglog_terms,
    matmul_features,
    rowwise_features,
    scatter_features,
)
from distir.ir import DType

__all__ = ["FitReport", "fit_rows", "ape", "LARGE", "fit_key", "PER_DTYPE", "MATMULS"]

MATMULS = ("matmul", "matmul_unaligned", "matmul_tn", "matmul_nt")
"""Families of single products, features ``hardware.matmul_features``: contiguous operands
(aligned or not), and an operand read transposed (``calibration.bench_matmul_grad``)."""

BMMS = ("bmm", "bmm_nt", "bmm_tn")
"""Families of batched products (both operands batched), features
``hardware.bmm_features``: contiguous operands, and one read transposed."""

LARGE = {"matmul": ("flops", 1e9), "matmul_unaligned": ("flops", 1e9),
         "matmul_tn": ("flops", 1e9), "matmul_nt": ("flops", 1e9),
         "bmm_nt": ("flops", 1e9), "bmm_tn": ("flops", 1e9),
         "bmm": ("flops", 1e9), "elementwise": ("bytes", float(1 << 20)),
         **{f"conv{x}{r}": ("flops", 1e9) for x in ("", "_nhwc")
            for r in ("", "_dgrad", "_wgrad")},
         **{f"conv_grouped{x}{r}": ("bytes", float(1 << 20)) for x in ("", "_nhwc")
            for r in ("", "_dgrad", "_wgrad")}}
"""What counts as large for the headline error: matmuls of at least 1 GFLOP, every other
family (collectives included) at least 1 MiB."""


DOMAIN = {**dict.fromkeys(MATMULS, ("m", "n", "k")),
          **dict.fromkeys(BMMS, ("batch", "m", "n", "k"))}
"""The features whose measured range a fit of these families records (``FitModel.domain``):
a layout's fit is not used below it (``Hardware.layout_matmul_time``)."""

NORM = ("batchnorm", "batchnorm_grad")
"""Batch normalizations: features ``bytes``, ``channels``, ``spatial``."""

ROWWISE = ("layernorm", "layernorm_grad", "reduce", "copy", "pad", "avgpool", "avgpool_grad",
           "groupnorm", "gather_elements", "scatter_elements")
"""Kernels over rows whose speed per byte depends on the rows' shape: features ``bytes``,
``width`` (the normalized row's length; a reduction's kept elements) and ``inner`` (a
reduction's reduced elements after its last kept axis, 1 when the rows are reduced over
the leading axes; the op name's ``i...``, ``calibration.bench_train``): a layer norm over
ConvNeXt's 96 channels runs 5 times slower per byte than one over 768, and a bias
gradient over an image's pixels (``[N, C, H * W]`` reduced to ``[C]``) otherwise than one
over the rows of ``[N, C]``. A copy's ``width`` is its result's last axis and ``inner``
its input's (``calibration.bench_nn.copy_axes``); a pad's ``width`` the padded rows'
length; an average pool's (or its gradient's) ``width`` its channels and ``inner`` its
stride (a stride-1 pool writes four times the outputs of a stride-2 one per byte read); a
group norm's ``width`` a group's elements and ``inner`` a channel's pixels; an indexing
op's (``GatherElements``, an adding ``ScatterElements``) ``width`` the data's length along
the indexed axis and ``inner`` how many times the index is broadcast."""

CONV = ("conv", "conv_dgrad", "conv_wgrad", "conv_nhwc", "conv_nhwc_dgrad", "conv_nhwc_wgrad")
"""Convolution families (``calibration.bench_train``): the forward's implicit-GEMM features
plus ``window`` and ``stride``, per dtype; ``_nhwc`` those of channels-last inputs."""

GROUPED_CONV = ("conv_grouped", "conv_grouped_dgrad", "conv_grouped_wgrad",
                "conv_grouped_nhwc", "conv_grouped_nhwc_dgrad", "conv_grouped_nhwc_wgrad")
"""Convolutions of more than one group (depthwise ones mostly): the same features and
``groups``; their kernels are bound by memory and latency more than by FLOPs."""

CONV1D = ("conv1d", "conv1d_dgrad", "conv1d_wgrad")
"""1-D convolutions, dense and grouped (``calibration.bench_train.conv1d_shapes``): the
grouped convolutions' features and models (``window`` the kernel's length, ``pixels`` the
output's)."""

TRAIN_KERNELS = ("batchnorm", "batchnorm_grad", "layernorm_grad", "softmax_grad",
                 "cross_entropy", "cross_entropy_grad", "adam", "scatter_add", "reduce",
                 "maxpool", "maxpool_grad", "avgpool", "avgpool_grad", "scatter_add_few",
                 "where", "pad", "groupnorm", "gather_elements",
                 "scatter_elements", "concat")
"""The memory-bound training families (``calibration.bench_train``)."""

PER_DTYPE = (*MATMULS, *BMMS, *CONV, *GROUPED_CONV, *CONV1D, "softmax", "layernorm", "gelu",
             "copy", "elementwise_bcast", "scatter_add_repeated", *TRAIN_KERNELS)
"""Families fitted per dtype (the memory-bound kernel families too: half-precision softmax,
layer norm, copies and broadcasting kernels move fewer bytes per second than float32 ones,
and the training kernels of 16-bit tensors compute in float32: a bfloat16 layer-norm
gradient or Adam update takes 1.4-2 times the float32 fit's time for its bytes, measured
kernel by kernel in a replayed step, docs/fidelity.md); ``elementwise`` is pooled under
``any`` (its feature is bytes), collectives keyed by group size. A dtype without its own fit
takes the same-width dtype's, else ``any``'s, else float32's (``Hardware._kernel_fit``):
a profile measured in float32 alone prices every dtype as before."""

COMPUTE = ("elementwise", "batchnorm",
           "batchnorm_grad", "layernorm_grad", "softmax_grad", "cross_entropy",
           "cross_entropy_grad", "adam", "scatter_add", "reduce", "maxpool", "maxpool_grad",
           "avgpool", "avgpool_grad", "scatter_add_few", "groupnorm", "gather_elements",
           "scatter_elements")


def fit_key(row: dict[str, Any]) -> str:
    """The key of a row's fit within its family."""
    fam = row["family"]
    if fam in PER_DTYPE:
        return str(row["dtype"])
    if fam in COMPUTE:
        return "any"
    return str(int(row["group_size"]))


def _large(family: str) -> tuple[str, float]:
    return LARGE.get(family, ("bytes", float(1 << 20)))


@dataclass
class FitReport:
    """The chosen model of one family and key, and its quality on held-out rows."""

    family: str
    key: str
    model_name: str
    model: FitModel
    n_train: int
    n_test: int
    r2_log: float | None                 # R^2 of log time on the held-out rows
    median_ape: float | None             # median |pred - t| / t on the held-out rows
    n_large: int = 0                     # held-out rows of at least 1 GFLOP / 1 MiB
    median_ape_large: float | None = None
    cv: dict[str, float] = field(default_factory=dict)  # candidate -> CV score

    def as_dict(self) -> dict[str, Any]:
        return {"family": self.family, "key": self.key, "model": self.model_name,
                "n_train": self.n_train, "n_test": self.n_test, "r2_log": self.r2_log,
                "median_ape": self.median_ape, "n_large": self.n_large,
                "median_ape_large": self.median_ape_large, "cv_score": self.cv}


def ape(pred: float, t: float) -> float:
    """Absolute percentage error, as a fraction."""
    return abs(pred - t) / t


def _x(row: dict[str, Any]) -> dict[str, float]:
    """The features of a row (those of ``hardware.matmul_features`` for a matmul)."""
    if row["family"] in MATMULS:
        m, n, k = int(row["m"]), int(row["n"]), int(row["k"])
        x = matmul_features(m, n, k, 1)
        x["bytes"] = float(row["bytes"])  # the measured dtype's bytes
        return x
    if row["family"] in NORM:
        from calibration.bench_train import norm_features

        return norm_features(str(row["op"]), int(row["n"]), float(row["bytes"]))
    if row["family"] in CONV or row["family"] in GROUPED_CONV or row["family"] in CONV1D:
        from calibration.bench_train import conv_geometry
        from distir.analysis.cost.train import conv_features

        g = conv_geometry(str(row["op"]))
        m, k = int(row["m"]), int(row["k"])
        return conv_features(m, int(row["n"]), k, float(row["bytes"]), g["k"], g["s"],
                             g.get("n", 1), g.get("c", k // g["k"]),
                             g.get("p", m // g.get("n", 1)), g.get("g", 1))
    if row["family"] == "copy":
        from calibration.bench_nn import copy_axes

        return rowwise_features(float(row["bytes"]),
                                *copy_axes(str(row["op"]), int(row["m"]), int(row["n"])))
    if row["family"] in ROWWISE:
        words = str(row["op"]).split()[1:]
        inner = [int(w[1:]) for w in words if w[:1] == "i"]
        run = [int(w[3:]) for w in words if w[:3] == "run"]
        # (a pool's row without a stride is one of the stride-2 rows measured before it
        # was recorded)
        default = 2 if row["family"] in ("avgpool", "avgpool_grad") else 1
        return rowwise_features(float(row["bytes"]), int(row["n"]),
                                inner[0] if inner else default, run[0] if run else None)
    if row["family"] == "elementwise_bcast":  # a Where of a mask, or arithmetic
        return broadcast_features(float(row["bytes"]), row["op"] == "where_mask")
    if row["family"] == "concat":
        words = str(row["op"]).split()[1:]
        tags = {w[:1]: int(w[1:]) for w in words if w[1:].isdigit()}
        width, inner = int(row["n"]), tags.get("i", 1)
        size = DType[str(row["dtype"])].itemsize
        rows = int(round(float(row["bytes"]) / (2 * width * inner * size)))
        return concat_features(float(row["bytes"]), rows, width, inner, tags.get("p", 2),
                               bool(tags.get("a", 0)), not tags.get("s", 0), tags.get("r", 3))
    if row["family"] == "scatter_add_repeated":
        return scatter_features(int(row["m"]), int(row["n"]), int(row["k"]),
                                float(row["bytes"]))
    if row["family"] in BMMS:
        m, n, k = int(row["m"]), int(row["n"]), int(row["k"])
        batch = max(int(round(float(row["flops"]) / (2.0 * m * n * k))), 1)
        x = bmm_features(batch, m, n, k, 1)
        x["bytes"] = float(row["bytes"])
        return x
    return {"bytes": float(row["bytes"])}


Trainer = Callable[[Sequence[dict[str, Any]]], FitModel]


def _linear(features: tuple[str, ...]) -> Trainer:
    def train(rows: Sequence[dict[str, Any]]) -> FitModel:
        import numpy as np
        from sklearn.linear_model import LinearRegression

        X = np.array([[_x(r)[f] for f in features] for r in rows])
        y = np.array([r["seconds"] for r in rows])
        reg = LinearRegression(positive=True).fit(X, y, sample_weight=1.0 / y**2)
        return FitModel("linear", features, intercept=float(reg.intercept_),
                        coef=tuple(float(c) for c in reg.coef_))
    return train


def _loglog(features: tuple[str, ...], degree: int) -> Trainer:
    def train(rows: Sequence[dict[str, Any]]) -> FitModel:
        import numpy as np
        from sklearn.linear_model import Ridge

        raw = np.array([[_x(r)[f] for f in features] for r in rows])
        X = np.array([loglog_terms([math.log(v) for v in row], degree) for row in raw])
        y = np.log([r["seconds"] for r in rows])
        reg = Ridge(alpha=1e-6).fit(X, y)
        return FitModel("loglog", features, intercept=float(reg.intercept_),
                        coef=tuple(float(c) for c in reg.coef_), degree=degree,
                        lo=tuple(float(v) for v in raw.min(axis=0)),
                        hi=tuple(float(v) for v in raw.max(axis=0)))
    return train


def _boosted(features: tuple[str, ...], tree_features: tuple[str, ...],
             n_trees: int = 150, depth: int = 3, rate: float = 0.1) -> Trainer:
    """A ``linear`` base times ``exp`` of gradient-boosted trees on the log residual."""
    def train(rows: Sequence[dict[str, Any]]) -> FitModel:
        import numpy as np
        from sklearn.ensemble import GradientBoostingRegressor

        base = _linear(features)(rows)
        xs = [_x(r) for r in rows]
        X = np.array([[math.log(x[f]) for f in tree_features] for x in xs])
        resid = np.array([math.log(r["seconds"]) - math.log(max(base(x), 1e-12))
                          for r, x in zip(rows, xs)])
        gbr = GradientBoostingRegressor(n_estimators=n_trees, max_depth=depth,
                                        learning_rate=rate, init="zero", min_samples_leaf=3,
                                        random_state=0).fit(X, resid)
        trees = []
        for est in gbr.estimators_[:, 0]:
            t = est.tree_
            nodes = []
            for i in range(t.node_count):
                if t.children_left[i] < 0:
                    nodes.append((-1, 0.0, 0, 0, float(t.value[i].ravel()[0]) * rate))
                else:
                    nodes.append((int(t.feature[i]), float(t.threshold[i]),
                                  int(t.children_left[i]), int(t.children_right[i]), 0.0))
            trees.append(tuple(nodes))
        model = FitModel("boosted", features, intercept=base.intercept, coef=base.coef,
                         tree_features=tree_features, trees=tuple(trees))
        # The exported trees must predict what scikit-learn predicts.
        ref = gbr.predict(X)
        for x, r in zip(xs[:20], ref[:20]):
            got = math.log(model(x)) - math.log(max(base(x), 1e-12))
            if abs(got - r) > 1e-6:
                raise RuntimeError(f"tree export mismatch: {got} != {r}")
        return model
    return train


def _piecewise(every: int) -> Trainer:
    def train(rows: Sequence[dict[str, Any]]) -> FitModel:
        import numpy as np
        from sklearn.linear_model import Ridge
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import SplineTransformer

        lx = np.log([float(r["bytes"]) for r in rows])
        y = np.log([r["seconds"] for r in rows])
        xs = np.unique(lx)
        knots = xs[::every]
        if knots[-1] != xs[-1]:
            knots = np.append(knots, xs[-1])
        if len(knots) < 2:
            knots = np.array([xs[0], xs[0] + 1.0])
        model = make_pipeline(
            SplineTransformer(degree=1, knots=knots.reshape(-1, 1), extrapolation="linear"),
            Ridge(alpha=1e-6))
        model.fit(lx.reshape(-1, 1), y)
        ts = np.exp(model.predict(knots.reshape(-1, 1)))
        return FitModel("piecewise", ("bytes",), xs=tuple(float(v) for v in np.exp(knots)),
                        ts=tuple(float(v) for v in ts))
    return train


def candidates(family: str) -> dict[str, Trainer]:
    if family in ("matmul_tn", "matmul_nt"):
        # Boosted trees only: a few LM-head shapes (n or k = 50257) run 4 to 5 times slower
        # per FLOP than the aligned ones, a jump that a smooth law fitted to the many
        # aligned shapes averages away (``linear(flops, bytes)`` won the cross-validation
        # there and priced them at a quarter of their measured time).
        return {"linear(flops, mn, mk, kn) x trees(m, n, k)":
                    _boosted(("flops", "mn", "mk", "kn"), ("m", "n", "k")),
                "linear(flops, mn, mk, kn) x trees(m, n, k, mn, flops)":
                    _boosted(("flops", "mn", "mk", "kn"), ("m", "n", "k", "mn", "flops")),
                "linear(flops, mn, mk, kn) x deep trees(m, n, k)":
                    _boosted(("flops", "mn", "mk", "kn"), ("m", "n", "k"), 300, 4, 0.05)}
    if family in MATMULS:
        return {"linear(flops, bytes)": _linear(("flops", "bytes")),
                "linear(flops, mn, mk, kn)": _linear(("flops", "mn", "mk", "kn")),
                "loglog2(m, n, k)": _loglog(("m", "n", "k"), 2),
                "loglog3(m, n, k)": _loglog(("m", "n", "k"), 3),
                "loglog2(flops, bytes)": _loglog(("flops", "bytes"), 2),
                "linear(flops, mn, mk, kn) x trees(m, n, k)":
                    _boosted(("flops", "mn", "mk", "kn"), ("m", "n", "k")),
                "linear(flops, mn, mk, kn) x trees(m, n, k, mn, flops)":
                    _boosted(("flops", "mn", "mk", "kn"), ("m", "n", "k", "mn", "flops")),
                "linear(flops, mn, mk, kn) x deep trees(m, n, k)":
                    _boosted(("flops", "mn", "mk", "kn"), ("m", "n", "k"), 300, 4, 0.05)}
    if family in CONV:
        return {"linear(flops, bytes)": _linear(("flops", "bytes")),
                "linear(flops, mn, mk, kn)": _linear(("flops", "mn", "mk", "kn")),
                "loglog2(m, n, k)": _loglog(("m", "n", "k"), 2),
                "linear(flops, mn, mk, kn) x trees(m, n, k, window, stride)":
                    _boosted(("flops", "mn", "mk", "kn"), ("m", "n", "k", "window", "stride")),
                "linear(flops, bytes) x trees(m, n, k, window, stride, flops)":
                    _boosted(("flops", "bytes"), ("m", "n", "k", "window", "stride",
                                                  "flops")),
                "linear(flops, mn, mk, kn) x trees(batch, cin, n, pixels, window, stride)":
                    _boosted(("flops", "mn", "mk", "kn"),
                             ("batch", "cin", "n", "pixels", "window", "stride")),
                "linear(flops, mn, mk, kn) x deep trees(batch, cin, n, pixels, window, "
                "stride)": _boosted(("flops", "mn", "mk", "kn"),
                                    ("batch", "cin", "n", "pixels", "window", "stride"),
                                    300, 4, 0.05)}
    if family in GROUPED_CONV or family in CONV1D:
        trees = ("batch", "cin", "n", "pixels", "window", "stride", "groups")
        return {"linear(flops, bytes)": _linear(("flops", "bytes")),
                "loglog2(bytes, flops)": _loglog(("bytes", "flops"), 2),
                "linear(flops, bytes) x trees(batch, cin, n, pixels, window, stride, groups)":
                    _boosted(("flops", "bytes"), trees),
                "linear(flops, bytes) x deep trees(batch, cin, n, pixels, window, stride, "
                "groups)": _boosted(("flops", "bytes"), trees, 300, 4, 0.05),
                # (cuDNN's 1-D kernels jump between neighbouring shapes: on the 800 of
                # grid_search/results/conv1d_tokens/, depth 6 takes the forward's held-out
                # median from 22.5% to 15.2%)
                "linear(flops, bytes) x deeper trees(batch, cin, n, pixels, window, stride, "
                "groups)": _boosted(("flops", "bytes"), trees, 300, 6, 0.05)}
    if family in NORM:
        return {"linear(bytes)": _linear(("bytes",)),
                "piecewise(every size)": _piecewise(1),
                "piecewise(every 2nd size)": _piecewise(2),
                "loglog2(bytes, channels, spatial)":
                    _loglog(("bytes", "channels", "spatial"), 2),
                "linear(bytes) x trees(bytes, channels, spatial)":
                    _boosted(("bytes",), ("bytes", "channels", "spatial"))}
    if family in ROWWISE:
        return {"linear(bytes)": _linear(("bytes",)),
                "piecewise(every size)": _piecewise(1),
                "piecewise(every 2nd size)": _piecewise(2),
                "loglog2(bytes, width, inner)": _loglog(("bytes", "width", "inner"), 2),
                "linear(bytes) x trees(bytes, width, inner)":
                    _boosted(("bytes",), ("bytes", "width", "inner")),
                "linear(bytes) x deep trees(bytes, width, inner)":
                    _boosted(("bytes",), ("bytes", "width", "inner"), 300, 4, 0.05),
                "linear(bytes) x deep trees(bytes, rows, width, inner)":
                    _boosted(("bytes",), ("bytes", "rows", "width", "inner"), 300, 4, 0.05),
                "linear(bytes) x deep trees(bytes, rows, width, inner, run)":
                    _boosted(("bytes",), ("bytes", "rows", "width", "inner", "run"), 300, 4,
                             0.05),
                # (PyTorch's reductions change kernels with the rows, the kept width and
                # its runs: call A of grid_search/results/strided_reduce/ measured 1,152
                # shapes a dtype, whose cross-validated error depth 6 takes from 5.5% to
                # 3.6%; deeper trees fit better still but make the profile megabytes
                # larger)
                "linear(bytes) x deeper trees(bytes, rows, width, inner, run)":
                    _boosted(("bytes",), ("bytes", "rows", "width", "inner", "run"), 300, 6,
                             0.05)}
    if family == "elementwise_bcast":
        return {**_by_bytes(),
                # (a Where of a broadcast mask takes 1.5 times an add of a broadcast bias:
                # pooled by bytes, the add was priced 5.3 us where it takes 2.9,
                # grid_search/results/strided_reduce/bias_probe.txt)
                "linear(bytes) x trees(bytes, where)":
                    _boosted(("bytes",), ("bytes", "where"))}
    if family == "concat":
        feats = ("bytes", "rows", "width", "inner", "parts", "aligned", "contiguous", "rank")
        return {"linear(bytes)": _linear(("bytes",)),
                "linear(bytes) x deep trees(bytes, rows, width, inner, parts, aligned, "
                "contiguous, rank)": _boosted(("bytes",), feats, 300, 4, 0.05),
                "linear(bytes) x deeper trees(bytes, rows, width, inner, parts, aligned, "
                "contiguous, rank)": _boosted(("bytes",), feats, 300, 6, 0.05)}
    if family == "scatter_add_repeated":
        return {"linear(bytes)": _linear(("bytes",)),
                "linear(rows, bytes)": _linear(("rows", "bytes")),
                "loglog2(rows, width, table)": _loglog(("rows", "width", "table"), 2),
                "linear(rows, bytes) x trees(rows, width, table)":
                    _boosted(("rows", "bytes"), ("rows", "width", "table"))}
    if family in BMMS:
        return {"linear(flops, bytes)": _linear(("flops", "bytes")),
                "linear(flops, mn, mk, kn)": _linear(("flops", "mn", "mk", "kn")),
                "loglog2(batch, m, n, k)": _loglog(("batch", "m", "n", "k"), 2),
                "linear(flops, mn, mk, kn) x trees(batch, m, n, k)":
                    _boosted(("flops", "mn", "mk", "kn"), ("batch", "m", "n", "k")),
                "linear(flops, mn, mk, kn) x trees(batch, m, n, k, flops)":
                    _boosted(("flops", "mn", "mk", "kn"), ("batch", "m", "n", "k", "flops")),
                # (small products in many batches: cuBLAS changes kernels with the batch,
                # grid_search/results/strided_reduce/ calls G-I)
                "linear(flops, mn, mk, kn) x deeper trees(batch, m, n, k, flops)":
                    _boosted(("flops", "mn", "mk", "kn"), ("batch", "m", "n", "k", "flops"),
                             300, 6, 0.05)}
    return _by_bytes()


def _by_bytes() -> dict[str, Trainer]:
    """The candidates of a kernel family fitted on its bytes alone."""
    return {"linear(bytes)": _linear(("bytes",)),
            "piecewise(every size)": _piecewise(1),
            "piecewise(every 2nd size)": _piecewise(2),
            "piecewise(every 4th size)": _piecewise(4)}


def _predict(model: FitModel, row: dict[str, Any]) -> float:
    return max(model(_x(row)), 1e-9)


def _cv_error(train: Trainer, rows: Sequence[dict[str, Any]], family: str, folds: int = 5,
              seed: int = 0) -> float:
    """The cross-validated score of a candidate: the mean of the median APE over all
    validation points and over the large ones (at least 1 GFLOP / 1 MiB), which dominate
    a step's time; the median over all when there are no large ones."""
    from sklearn.model_selection import KFold

    if len(rows) < 2 * folds:
        folds = max(2, len(rows) // 2)
    feat, lo = _large(family)
    errs: list[float] = []
    large: list[float] = []
    for tr, va in KFold(folds, shuffle=True, random_state=seed).split(list(rows)):
        try:
            model = train([rows[i] for i in tr])
        except Exception:  # noqa: BLE001 - a degenerate fold (too few sizes): skip it
            continue
        for i in va:
            e = ape(_predict(model, rows[i]), rows[i]["seconds"])
            errs.append(e)
            if float(rows[i][feat]) >= lo:
                large.append(e)
    if not errs:
        return math.inf
    if not large:
        return statistics.median(errs)
    return 0.5 * (statistics.median(errs) + statistics.median(large))


def fit_one(family: str, key: str, rows: Sequence[dict[str, Any]]) -> FitReport | None:
    """The best candidate for one family and key (``None`` with fewer than 4 rows)."""
    train_rows = [r for r in rows if r["split"] == "train" and r["seconds"] > 0]
    test_rows = [r for r in rows if r["split"] == "test" and r["seconds"] > 0]
    if len(train_rows) < 4:
        return None
    cands = candidates(family)
    cv = {name: _cv_error(t, train_rows, family) for name, t in cands.items()}
    best = min(cv, key=lambda n: cv[n])
    model = cands[best](train_rows)
    dims = DOMAIN.get(family)
    if dims:
        feats = [_x(r) for r in train_rows + test_rows]
        model = replace(model, domain=tuple(
            (f, min(x[f] for x in feats), max(x[f] for x in feats)) for f in dims))
    r2 = med = med_large = None
    n_large = 0
    if test_rows:
        preds = [_predict(model, r) for r in test_rows]
        ts = [r["seconds"] for r in test_rows]
        med = statistics.median(ape(p, t) for p, t in zip(preds, ts))
        if len(test_rows) >= 2:
            from sklearn.metrics import r2_score

            r2 = float(r2_score([math.log(t) for t in ts], [math.log(p) for p in preds]))
        feat, lo = _large(family)
        large = [ape(p, t) for p, t, r in zip(preds, ts, test_rows) if float(r[feat]) >= lo]
        n_large = len(large)
        med_large = statistics.median(large) if large else None
    return FitReport(family, key, best, model, len(train_rows), len(test_rows), r2, med,
                     n_large, med_large, cv)


def fit_rows(rows: Sequence[dict[str, Any]], log: Callable[[str], None] = lambda s: None,
             ) -> list[FitReport]:
    """Fit every family present in ``rows``: matmul and bmm per dtype, elementwise and the
    kernel families pooled, collectives per group size (``fit_key``)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["family"], fit_key(r)), []).append(r)
    out = []
    for (fam, key), rs in sorted(groups.items()):
        rep = fit_one(fam, key, rs)
        if rep is None:
            log(f"fit {fam}/{key}: too few measurements, skipped")
            continue
        log(f"fit {fam}/{key}: {rep.model_name}, held-out median error "
            + ("n/a" if rep.median_ape is None else f"{100 * rep.median_ape:.1f}%"))
        out.append(rep)
    return out


def pooled(reports: Sequence[FitReport], rows: Sequence[dict[str, Any]], families: set[str],
           ) -> tuple[int, float | None]:
    """``(count, median APE)`` over the large held-out rows of several families."""
    models = {(r.family, r.key): r.model for r in reports}
    errs = []
    for row in rows:
        fam = row["family"]
        if fam not in families or row["split"] != "test" or row["seconds"] <= 0:
            continue
        m = models.get((fam, fit_key(row)))
        feat, lo = _large(fam)
        if m is not None and float(row[feat]) >= lo:
            errs.append(ape(_predict(m, row), row["seconds"]))
    return len(errs), (statistics.median(errs) if errs else None)
