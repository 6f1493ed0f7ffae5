"""Numpy kernels written here for the ONNX ops whose ``onnx.reference`` kernel is wrong on
valid inputs (``onnx_ops.OWN_KERNELS``); every other ONNX op runs the reference's.

- ``GatherElements``: onnx 1.23's reference picks with ``numpy.choose``, which takes at
  most 32 (numpy 1) or 64 (numpy 2) choices, and its fallback for a longer axis reads only
  the first index of each row (the BERT export's 64-wide token-type gather fails).
- ``ConvTranspose``: the reference splits the weights of ``group > 1`` along the wrong
  axis (it fails, or is wrong, for every grouped case).
- ``LpNormalization``: the reference sums ``x ** p``, not ``|x| ** p`` (wrong for ``p=1``
  on negative values), and reads ``axis=0`` as the default.
- ``Pad``: the reference fails on negative pads (a crop, which the spec allows); they
  crop first, then the reference pads by the others.

Both follow the ONNX spec; tests compare them with onnxruntime and with ONNX's node cases.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from distir.analysis.rules import NUMPY_RULES
from distir.errors import ExecutionError


@NUMPY_RULES.register("GatherElements")
def gather_elements(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    """``out[..., j, ...] = data[..., indices[..., j, ...], ...]`` along ``axis``, indices
    from the end when negative; on the other axes the indices may be shorter than the data
    (as in onnxruntime and ``torch.gather``)."""
    data, ind = np.asarray(args[0]), np.asarray(args[1])
    rank = data.ndim
    axis = int(attrs.get("axis", 0))
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank or ind.ndim != rank:
        raise ExecutionError(f"indices of shape {ind.shape} and axis {attrs.get('axis', 0)} "
                             f"do not fit data of shape {data.shape}")
    n = data.shape[axis]
    if ind.size and (ind.min() < -n or ind.max() >= n):
        raise ExecutionError(f"an index lies outside [-{n}, {n}), the size of axis {axis}")
    crop = tuple(slice(None) if k == axis else slice(0, d) for k, d in enumerate(ind.shape))
    idx = np.where(ind < 0, ind + n, ind).astype(np.int64)
    return (np.take_along_axis(data[crop], idx, axis=axis),)


@NUMPY_RULES.register("LpNormalization")
def lp_normalization(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    """``x / (sum |x|^p)^(1/p)`` along ``axis`` (p 1 or 2); 0 where the norm is 0."""
    x = np.asarray(args[0])
    p = int(attrs.get("p", 2))
    if p not in (1, 2):
        raise ExecutionError(f"p={p}: LpNormalization takes p=1 or p=2")
    axis = int(attrs.get("axis", -1))
    norm = (np.abs(x.astype(np.float64)) ** p).sum(axis=axis, keepdims=True) ** (1.0 / p)
    safe = np.where(norm == 0, 1.0, norm)
    return (np.where(norm == 0, 0.0, x / safe).astype(x.dtype),)


def conv_transpose_geometry(x_shape: tuple[int, ...], w_shape: tuple[int, ...],
                            attrs: dict[str, Any],
                            ) -> tuple[list[int], list[int], list[int], list[int]]:
    """``(full, begin, out, strides_dilations...)`` of a transposed convolution: the
    unpadded result size ``s * (d - 1) + (k - 1) * dilation + 1`` of each spatial axis,
    where the result starts in it (its begin pad), and the result size (``output_shape``,
    or ``d * s`` for ``SAME_*``, or ``full + output_padding - pads``)."""
    n = len(x_shape) - 2
    strides = list(attrs.get("strides") or [1] * n)
    dil = list(attrs.get("dilations") or [1] * n)
    extra = list(attrs.get("output_padding") or [0] * n)
    full = [s * (d - 1) + (k - 1) * dl + 1
            for s, d, k, dl in zip(strides, x_shape[2:], w_shape[2:], dil, strict=True)]
    auto = attrs.get("auto_pad", "NOTSET")
    given = attrs.get("output_shape")
    pads = attrs.get("pads")
    if given is not None:
        out = [int(v) for v in list(given)[-n:]]
    elif auto in ("SAME_UPPER", "SAME_LOWER"):
        out = [d * s for d, s in zip(x_shape[2:], strides, strict=True)]
    else:
        p = list(pads or [0] * (2 * n)) if auto == "NOTSET" else [0] * (2 * n)
        out = [f + e - p[i] - p[n + i] for i, (f, e) in enumerate(zip(full, extra, strict=True))]
    if pads is None and auto in ("SAME_UPPER", "SAME_LOWER"):
        total = [f + e - o for f, e, o in zip(full, extra, out, strict=True)]
        begin = [t // 2 if auto == "SAME_UPPER" else t - t // 2 for t in total]
    else:
        begin = list(pads or [0] * (2 * n))[:n] if auto == "NOTSET" else [0] * n
    return full, begin, out, strides + dil


@NUMPY_RULES.register("ConvTranspose")
def conv_transpose(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    """Each input pixel scatters ``x * W`` over its window: for every kernel offset, the
    contribution of all pixels lands on a strided slice of the unpadded result, which is
    then cut to the result's size from its begin pad (zero where it reaches past the
    unpadded result), and the bias added. Accumulates in float64."""
    x, w = np.asarray(args[0]), np.asarray(args[1])
    b = None if len(args) < 3 or args[2] is None else np.asarray(args[2])
    n = x.ndim - 2
    g = int(attrs.get("group", 1))
    full, begin, out, sd = conv_transpose_geometry(x.shape, w.shape, attrs)
    strides, dil = sd[:n], sd[n:]
    batch, c, spatial = x.shape[0], x.shape[1], x.shape[2:]
    mg = w.shape[1]
    xg = x.astype(np.float64).reshape(batch, g, c // g, *spatial)
    wg = w.astype(np.float64).reshape(g, c // g, mg, *w.shape[2:])
    y = np.zeros((batch, g * mg, *full))
    for kk in itertools.product(*(range(k) for k in w.shape[2:])):
        part = np.einsum("ngc...,gcm->ngm...", xg, wg[(...,) + kk])
        where = tuple(slice(k * dl, k * dl + s * (d - 1) + 1, s)
                      for k, dl, s, d in zip(kk, dil, strides, spatial, strict=True))
        y[(slice(None), slice(None)) + where] += part.reshape(batch, g * mg, *spatial)
    res = np.zeros((batch, g * mg, *out))
    src, dst = [], []
    for f, bg, o in zip(full, begin, out, strict=True):
        lo, hi = max(bg, 0), min(bg + o, f)
        src.append(slice(lo, max(hi, lo)))
        dst.append(slice(lo - bg, lo - bg + max(hi - lo, 0)))
    res[(slice(None), slice(None)) + tuple(dst)] = y[(slice(None), slice(None)) + tuple(src)]
    if b is not None:
        res += b.reshape((1, -1) + (1,) * n)
    return (res.astype(x.dtype),)


@NUMPY_RULES.register("Pad")
def pad(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    """The reference's kernel, but where a pad is negative (a crop: PyTorch's
    ``ZeroPad2d((0, 0, 1, -1))``, RWKV's token shift), which it fails on: the input cropped
    by the negative pads first, then padded by the others."""
    from distir.analysis.numpy_rules.onnx_ops import KERNELS

    pads = np.asarray(args[1]).reshape(-1).astype(np.int64)
    if (pads >= 0).all():
        return KERNELS.run(op_type, args, attrs, n_out)
    x = np.asarray(args[0])
    rank = x.ndim
    axes = list(range(rank)) if len(args) < 4 or args[3] is None else \
        [int(a) % rank for a in np.asarray(args[3]).reshape(-1)]
    k = len(pads) // 2
    if len(axes) != k:
        raise ExecutionError(f"Pad: {len(pads)} pads for {len(axes)} axes")
    index = [slice(None)] * rank
    for i, a in enumerate(axes):
        b, e = int(pads[i]), int(pads[k + i])
        index[a] = slice(max(-b, 0), x.shape[a] + min(e, 0))
    cropped = np.ascontiguousarray(x[tuple(index)])
    return KERNELS.run(op_type, (cropped, np.maximum(pads, 0), *args[2:]), attrs, n_out)
