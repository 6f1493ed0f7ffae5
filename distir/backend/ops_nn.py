"""Lowerings of the ONNX neural-network ops: matrix products, normalization, softmax,
reductions, convolution and pooling (ONNX opset 21 semantics).

Padding, output sizes and reduction axes are worked out from the static shapes once.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from distir.analysis.numpy_rules.kernels import conv_transpose_geometry
from distir.backend._dynamic import by_value, unknown
from distir.backend.lowering import LOWERINGS, Kernel, Static
from distir.errors import UnsupportedError
from distir.ir.padding import explicit_pads


@LOWERINGS.register("MatMul")
def _matmul(s: Static) -> Kernel:
    return lambda a, b: (torch.matmul(a, b),)


@LOWERINGS.register("Gemm")
def _gemm(s: Static) -> Kernel:
    alpha, beta = float(s.attrs["alpha"]), float(s.attrs["beta"])
    ta, tb = int(s.attrs["transA"]), int(s.attrs["transB"])
    has_c = len(s.in_types) > 2 and s.in_types[2] is not None
    out_shape = s.out().shape

    def k(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | None = None) -> tuple:
        a = a.t() if ta else a
        b = b.t() if tb else b
        if c is None or beta == 0.0:
            y = torch.mm(a, b)
            return (y if alpha == 1.0 else y * alpha,)
        return (torch.addmm(c.expand(out_shape), a, b, beta=beta, alpha=alpha),)

    if not has_c:
        return lambda a, b, *_: k(a, b)
    return k


@LOWERINGS.register("Softmax", "LogSoftmax")
def _softmax(s: Static) -> Kernel:
    axis = int(s.attrs.get("axis", -1))
    f = F.softmax if s.op_type == "Softmax" else F.log_softmax
    return lambda x: (f(x, dim=axis),)


@LOWERINGS.register("LayerNormalization")
def _layer_norm(s: Static) -> Kernel:
    x_t = s.inp(0)
    axis = int(s.attrs.get("axis", -1)) % x_t.rank
    eps = float(s.attrs["epsilon"])
    norm_shape = x_t.shape[axis:]
    dims = tuple(range(axis, x_t.rank))
    n_out = len(s.out_types)
    exact = s.inp(1).shape == norm_shape and (
        len(s.in_types) < 3 or s.in_types[2] is None or s.inp(2).shape == norm_shape)
    if n_out == 1 and exact:
        return lambda x, w, b=None: (F.layer_norm(x, norm_shape, w, b, eps),)

    def k(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> tuple:
        xf = x.float()
        var, mean = torch.var_mean(xf, dim=dims, keepdim=True, correction=0)
        inv = torch.rsqrt(var + eps)
        y = ((xf - mean) * inv).to(x.dtype) * w
        if b is not None:
            y = y + b
        return (y, mean, inv)[:n_out]

    return k


def _prod(x: torch.Tensor, dim: tuple[int, ...], keepdim: bool) -> torch.Tensor:
    for d in sorted(dim, reverse=True):  # torch.prod reduces one axis at a time
        x = torch.prod(x, dim=d, keepdim=keepdim)
    return x


def _l2(x: torch.Tensor, dim: tuple[int, ...], keepdim: bool) -> torch.Tensor:
    return torch.sqrt(torch.sum(x * x, dim=dim, keepdim=keepdim))


_REDUCE: dict[str, Any] = {
    "ReduceSum": torch.sum, "ReduceMean": torch.mean, "ReduceMax": torch.amax,
    "ReduceMin": torch.amin, "ReduceProd": _prod, "ReduceLogSumExp": torch.logsumexp,
    "ReduceL1": lambda x, dim, keepdim: torch.sum(torch.abs(x), dim=dim, keepdim=keepdim),
    "ReduceL2": _l2,
    "ReduceSumSquare": lambda x, dim, keepdim: torch.sum(x * x, dim=dim, keepdim=keepdim),
    "ReduceLogSum": lambda x, dim, keepdim: torch.log(torch.sum(x, dim=dim, keepdim=keepdim)),
}


@LOWERINGS.register(*_REDUCE)
def _reduce(s: Static) -> Kernel:
    if unknown(s, (1,)):
        return by_value(s, (1,), _reduce)
    rank = s.inp(0).rank
    keep = bool(s.attrs.get("keepdims", 1))
    if len(s.in_types) > 1 and s.in_types[1] is not None:
        c = s.const(1)
        if c is None:
            raise UnsupportedError("the axes must be known before the run")
        axes = tuple(int(a) % max(rank, 1) for a in c.reshape(-1))
    else:
        axes = ()
    if not axes:
        if s.attrs.get("noop_with_empty_axes", 0):  # a copy: the result is no view
            return lambda x, *_: (x.clone(),)
        axes = tuple(range(rank))
    f = _REDUCE[s.op_type]
    if not axes:  # a scalar: nothing to reduce
        return lambda x, *_: (x.clone(),)
    return lambda x, *_: (f(x, dim=axes, keepdim=keep),)


def _spatial(s: Static) -> tuple[int, list[int], list[int], list[int], list[int], list[int]]:
    """Spatial rank, kernel, strides, dilations, begin pads and end pads of a conv/pool."""
    x = s.inp(0)
    n = x.rank - 2
    if s.op_type == "Conv":
        kernel = list(s.attrs.get("kernel_shape") or s.inp(1).shape[2:])
    else:
        kernel = list(s.attrs["kernel_shape"])
    strides = list(s.attrs.get("strides") or [1] * n)
    dil = list(s.attrs.get("dilations") or [1] * n)
    pads = explicit_pads(x.shape[2:], kernel, strides, dil, s.attrs.get("pads"),
                         s.attrs.get("auto_pad", "NOTSET"))
    return n, kernel, strides, dil, pads[:n], pads[n:]


def _pad_arg(begin: list[int], end: list[int]) -> list[int]:
    """``F.pad``'s argument (last dimension first)."""
    out: list[int] = []
    for b, e in zip(reversed(begin), reversed(end)):
        out += [b, e]
    return out


@LOWERINGS.register("Conv")
def _conv(s: Static) -> Kernel:
    n, _, strides, dil, pb, pe = _spatial(s)
    conv: Any = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}.get(n)
    if conv is None:
        raise UnsupportedError(f"a convolution over {n} spatial dimensions")
    group = int(s.attrs.get("group", 1))
    if pb == pe:
        pad: Any = tuple(pb)
        return lambda x, w, b=None: (conv(x, w, b, strides, pad, dil, group),)
    padarg = _pad_arg(pb, pe)
    return lambda x, w, b=None: (conv(F.pad(x, padarg), w, b, strides, 0, dil, group),)


@LOWERINGS.register("ConvTranspose")
def _conv_transpose(s: Static) -> Kernel:
    """``conv_transpose`` without padding, then each spatial axis cropped from its begin pad
    to the result's size (zero-extended at the end where ``output_padding`` or
    ``output_shape`` asks for more), then the bias."""
    x_t, w_t = s.inp(0), s.inp(1)
    n = x_t.rank - 2
    conv: Any = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}.get(n)
    if conv is None:
        raise UnsupportedError(f"a transposed convolution over {n} spatial dimensions")
    group = int(s.attrs.get("group", 1))
    full, begin, out, sd = conv_transpose_geometry(x_t.shape, w_t.shape, s.attrs)
    strides, dil = sd[:n], sd[n:]
    arg: list[int] = []  # F.pad, last axis first: crop the begin, fit the end
    for i in reversed(range(n)):
        arg += [-begin[i], out[i] - (full[i] - begin[i])]
    view = (1, -1) + (1,) * n

    def k(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> tuple:
        y = F.pad(conv(x, w, None, strides, 0, 0, group, dil), arg)
        return (y if b is None else y + b.view(view),)

    return k


@LOWERINGS.register("MaxPool", "AveragePool")
def _pool(s: Static) -> Kernel:
    if len(s.out_types) > 1:
        raise UnsupportedError("the indices result of MaxPool")
    n, kernel, strides, dil, pb, pe = _spatial(s)
    ceil = bool(s.attrs.get("ceil_mode", 0))
    sym = pb == pe and all(2 * p <= k for p, k in zip(pb, kernel))
    padarg = _pad_arg(pb, pe)
    pool: Any
    if s.op_type == "MaxPool":
        pool = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[n]
        if sym:
            return lambda x: (pool(x, kernel, strides, tuple(pb), dil, ceil),)
        return lambda x: (pool(F.pad(x, padarg, value=float("-inf")), kernel, strides, 0, dil,
                               ceil),)
    if any(d != 1 for d in dil):
        raise UnsupportedError("AveragePool with dilations")
    pool = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[n]
    include = bool(s.attrs.get("count_include_pad", 0))
    if sym and (include or not any(pb) or not ceil):
        # (pads left out of the count, without ceil_mode: ATen divides by the window's
        # elements inside the input, as ONNX does; one call, where padding a copy and
        # dividing by pooled counts held five tensors of the input's size)
        return lambda x: (pool(x, kernel, strides, tuple(pb), ceil, include),)
    size = 1
    for width in kernel:
        size *= width
    spatial = s.inp(0).shape[2:]

    def k(x: torch.Tensor) -> tuple:
        sums = pool(F.pad(x, padarg), kernel, strides, 0, ceil, True) * size
        if include:
            return (sums / size,)
        ones = torch.ones((1, 1, *spatial), dtype=x.dtype, device=x.device)
        counts = pool(F.pad(ones, padarg), kernel, strides, 0, ceil, True) * size
        return (sums / counts,)

    return k


@LOWERINGS.register("GlobalAveragePool", "GlobalMaxPool")
def _global_avg(s: Static) -> Kernel:
    dims = tuple(range(2, s.inp(0).rank))
    if s.op_type == "GlobalMaxPool":
        return lambda x: (x.amax(dim=dims, keepdim=True),)
    return lambda x: (x.mean(dim=dims, keepdim=True),)


@LOWERINGS.register("Hardmax")
def _hardmax(s: Static) -> Kernel:
    """1 at the first maximum along ``axis``, 0 elsewhere."""
    x_t = s.inp(0)
    axis = int(s.attrs.get("axis", -1)) % x_t.rank
    n = x_t.shape[axis]

    def k(x: torch.Tensor) -> tuple:
        hot = F.one_hot(torch.argmax(x, dim=axis), n).movedim(-1, axis)
        return (hot.to(x.dtype),)

    return k


@LOWERINGS.register("LpNormalization")
def _lp_norm(s: Static) -> Kernel:
    """``x / ||x||_p`` along ``axis`` (p is 1 or 2); 0 where the norm is 0."""
    axis = int(s.attrs.get("axis", -1))
    p = int(s.attrs.get("p", 2))
    if p not in (1, 2):
        raise UnsupportedError(f"LpNormalization with p={p} (ONNX allows 1 and 2)")

    def k(x: torch.Tensor) -> tuple:
        norm = torch.linalg.vector_norm(x, ord=p, dim=axis, keepdim=True)
        return (torch.where(norm == 0, torch.zeros_like(x), x / norm),)

    return k


@LOWERINGS.register("MeanVarianceNormalization")
def _mvn(s: Static) -> Kernel:
    """ONNX's function body: ``(x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9)`` over ``axes``."""
    rank = s.inp(0).rank
    dims = tuple(int(a) % rank for a in (s.attrs.get("axes") or ()))

    def k(x: torch.Tensor) -> tuple:
        mean = x.mean(dim=dims, keepdim=True)
        var = (x * x).mean(dim=dims, keepdim=True) - mean * mean
        return ((x - mean) / (torch.sqrt(var) + 1e-9),)

    return k


@LOWERINGS.register("BatchNormalization")
def _batch_norm(s: Static) -> Kernel:
    """Inference mode: the running statistics, ``F.batch_norm``. Training mode (ONNX opset
    15+): the batch's statistics over every axis but 1 (biased variance) by
    ``aten.native_batch_norm``; the optional results are the new running statistics,
    ``running * momentum + batch * (1 - momentum)`` (ONNX's convention: the biased batch
    variance, unlike ``torch.nn.BatchNorm``'s unbiased one), in the running statistics'
    dtype, computed only when used."""
    eps = float(s.attrs["epsilon"])
    if not int(s.attrs.get("training_mode", 0)):
        if len(s.out_types) > 1:
            raise UnsupportedError("BatchNormalization in inference mode with more than one "
                                   "result (ONNX defines them in training mode only)")
        return lambda x, w, b, m, v: (F.batch_norm(x, m, v, w, b, False, 0.0, eps),)
    mom = float(s.attrs.get("momentum", 0.9))
    live = tuple(s.live_outputs[1:3]) + (False,) * (3 - len(s.live_outputs))
    fwd = torch.ops.aten.native_batch_norm

    def k(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, m: torch.Tensor,
          v: torch.Tensor) -> tuple:
        y, mean, invstd = fwd(x, w, b, None, None, True, 0.0, eps)
        new_m = new_v = None
        if live[0]:
            new_m = (m * mom + mean.to(m.dtype) * (1.0 - mom))
        if live[1]:  # invstd = 1 / sqrt(var + eps), in float32 at least
            var = invstd.double().pow(-2).sub_(eps)
            new_v = (v.double() * mom + var * (1.0 - mom)).to(v.dtype)
        return (y, new_m, new_v)[:len(s.out_types)]

    return k


@LOWERINGS.register("InstanceNormalization")
def _instance_norm(s: Static) -> Kernel:
    """Per sample and channel over the spatial axes, then per-channel scale and bias: a
    group norm of one channel per group, PyTorch's fused kernel (statistics in one pass,
    then one pass writing the scaled result; ``var_mean`` and four elementwise kernels
    read the tensor five times and write it four)."""
    x_t = s.inp(0)
    eps = float(s.attrs["epsilon"])
    c = x_t.shape[1] if x_t.rank >= 2 else 1

    def k(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> tuple:
        if x.dim() < 3:  # (N, C): each value is its own group
            return (torch.zeros_like(x) * w + b,)
        return (F.group_norm(x, c, w, b, eps),)

    return k


@LOWERINGS.register("GroupNormalization")
def _group_norm(s: Static) -> Kernel:
    """Opset 21: statistics per group of channels in the stash type (Float32 unless
    ``stash_type`` says otherwise), per-channel scale and bias in X's dtype: one fused
    kernel where X is of the stash type."""
    x_t = s.inp(0)
    g, eps = int(s.attrs["num_groups"]), float(s.attrs["epsilon"])
    stash = {1: torch.float32, 10: torch.float16, 11: torch.float64,
             16: torch.bfloat16}[int(s.attrs.get("stash_type", 1))]
    view = (1, x_t.shape[1]) + (1,) * (x_t.rank - 2)

    def k(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> tuple:
        if x.dtype == stash:
            return (F.group_norm(x, g, w, b, eps),)
        y = F.group_norm(x.to(stash), g, None, None, eps).to(x.dtype)
        return (y * w.view(view) + b.view(view),)

    return k


@LOWERINGS.register("LRN")
def _lrn(s: Static) -> Kernel:
    size = int(s.attrs["size"])
    alpha, beta, bias = float(s.attrs["alpha"]), float(s.attrs["beta"]), float(s.attrs["bias"])
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    channels = s.inp(0).shape[1]
    rank = s.inp(0).rank

    def k(x: torch.Tensor) -> tuple:
        sq = (x * x).transpose(1, rank - 1)  # channels last for F.pad
        sq = F.pad(sq, (before, after))
        acc = sq[..., 0:channels]
        for i in range(1, size):
            acc = acc + sq[..., i:i + channels]
        acc = acc.transpose(1, rank - 1)
        return (x / (bias + (alpha / size) * acc) ** beta,)

    return k
