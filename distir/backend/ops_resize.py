"""Lowerings of ONNX ``Resize`` (opset 19, the version in force at 21), ``GridSample``
(opset 20) and ``Col2Im`` (opset 18).

``Resize``: every mode
(nearest, linear, cubic, antialiased linear and cubic), coordinate transformation, nearest
rounding, ``exclude_outside`` and ``tf_crop_and_resize``'s extrapolation.

Resize is separable: each resized axis is interpolated on its own, one after another (the
ONNX reference does the same). At compile time each axis gets a tap table, for every output
position ``K`` input indices and weights (``axis_taps``, from the spec's formulas); at run
time the axis costs ``K`` ``index_select``s and a weighted sum (one ``index_select`` for
nearest). Results are computed in the input's float dtype; integer inputs take the
nearest mode only.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from distir.analysis.type_rules.spatial import col2im_geometry, resize_shape
from distir.analysis.values import Concrete
from distir.backend._dynamic import by_value, unknown
from distir.backend.lowering import LOWERINGS, Kernel, Static, torch_dtype
from distir.errors import UnsupportedError

__all__ = ["axis_taps"]


def _source(y: np.ndarray, n_in: int, n_out: int, scale: float, ctm: str,
            roi: tuple[float, float]) -> tuple[np.ndarray, np.ndarray | None]:
    """The input coordinate of each output position ``y``, and for ``tf_crop_and_resize``
    which positions fall outside the input (extrapolated)."""
    width = scale * n_in  # the output length before rounding, as the spec writes it
    if ctm == "half_pixel":
        return (y + 0.5) / scale - 0.5, None
    if ctm == "half_pixel_symmetric":
        offset = n_in / 2 * (1 - n_out / width)
        return offset + (y + 0.5) / scale - 0.5, None
    if ctm == "pytorch_half_pixel":
        return (np.full_like(y, -0.5) if width == 1 else (y + 0.5) / scale - 0.5), None
    if ctm == "align_corners":
        return (np.zeros_like(y) if width == 1 else y * (n_in - 1) / (width - 1)), None
    if ctm == "asymmetric":
        return y / scale, None
    lo, hi = roi  # tf_crop_and_resize
    if width == 1:
        x = np.full_like(y, (hi - lo) * (n_in - 1) / 2)
    else:
        x = y * (hi - lo) * (n_in - 1) / (width - 1)
    x = x + lo * (n_in - 1)
    return x, (x < 0) | (x > n_in - 1)


def _keys(t: np.ndarray, a: float) -> np.ndarray:
    """The cubic convolution kernel with coefficient ``a`` at distances ``t``."""
    t = np.abs(t)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


def axis_taps(n_in: int, n_out: int, scale: float, attrs: dict[str, Any],
              roi: tuple[float, float] = (0.0, 1.0),
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``(indices, weights, extrapolated)`` of one resized axis: output position ``o`` is
    ``sum_k weights[o, k] * x[indices[o, k]]`` (indices clamped to the input: the edge
    value stands for a neighbour outside it), or the extrapolation value where
    ``extrapolated[o]``.

    The neighbours of a source coordinate ``x`` are counted from ``i = floor(x)`` with
    fraction ``r = x - i``; an integral ``x`` is taken as ``i = x - 1, r = 1`` (the ONNX
    reference's convention, which picks the same pixel). Nearest takes one neighbour by
    ``nearest_mode``; linear and cubic weigh ``i + j`` by the kernel at ``s * (j - r)``,
    ``s = min(scale, 1)`` when antialiasing (a wider window when downsampling, weights
    normalized) and 1 otherwise; ``exclude_outside`` drops neighbours outside the input
    and renormalizes."""
    y = np.arange(n_out, dtype=np.float64)
    x, extrap = _source(y, n_in, n_out, scale, str(attrs["coordinate_transformation_mode"]),
                        roi)
    i = np.floor(x)
    r = x - i
    whole = r == 0
    i = np.where(whole, i - 1, i).astype(np.int64)
    r = np.where(whole, 1.0, r)
    mode = attrs["mode"]
    if mode == "nearest":
        nm = attrs["nearest_mode"]
        up = {"round_prefer_floor": r > 0.5, "round_prefer_ceil": r >= 0.5,
              "floor": np.zeros_like(r, dtype=bool), "ceil": np.ones_like(r, dtype=bool)}[nm]
        idx = np.where(whole | up, i + 1, i)
        return np.clip(idx, 0, n_in - 1)[:, None], np.ones((n_out, 1)), extrap
    antialias = bool(attrs.get("antialias", 0))
    s = min(scale, 1.0) if antialias else 1.0
    support = 1 if mode == "linear" else 2
    start = math.floor(-support / s) + 1
    offs = np.arange(start, 2 - start)
    dist = s * (offs[None, :] - r[:, None])
    if mode == "linear":
        w = np.clip(1 - np.abs(dist), 0, 1)
    else:
        w = _keys(dist, float(attrs["cubic_coeff_a"]))
    if antialias:
        w = w / w.sum(axis=1, keepdims=True)
    idx = i[:, None] + offs[None, :]
    if attrs.get("exclude_outside", 0):
        w = np.where((idx < 0) | (idx >= n_in), 0.0, w)
        total = w.sum(axis=1, keepdims=True)
        w = w / np.where(total == 0, 1.0, total)
    return np.clip(idx, 0, n_in - 1), w, extrap


def _scales(s: Static, axes: list[int], out_shape: tuple[int, ...]) -> tuple[float, ...]:
    """The scale of every axis (1.0 where not resized): from known ``scales`` or ``sizes``
    as the type rule computes them; from the types for ``sizes`` computed at run time
    (exported models compute them from ``Shape``) with the ``stretch`` policy, where the
    scale is ``size / d``."""
    x_t = s.inp(0)
    args = tuple(_input(s, i) for i in range(len(s.in_types)))
    given = [i for i in (2, 3) if i < len(args) and args[i] is not None
             and s.inp(i).numel > 0]
    if given and s.const(given[0]) is not None:
        return resize_shape(x_t.shape, args, s.attrs)[1]
    if given == [3] and s.attrs.get("keep_aspect_ratio_policy", "stretch") == "stretch":
        out = [1.0] * x_t.rank
        for a in axes:
            out[a] = out_shape[a] / x_t.shape[a]
        return tuple(out)
    raise UnsupportedError("the scales of Resize (or its sizes, with keep_aspect_ratio_policy "
                           "other than stretch) must be known before the run (a Constant)")


def _input(s: Static, i: int) -> Any:
    """Input i as the type rules see it: ``Concrete`` when known, else its type."""
    if i >= len(s.in_types) or s.in_types[i] is None:
        return None
    t, c = s.inp(i), s.const(i)
    return t if c is None else Concrete(t, c)


@LOWERINGS.register("Resize")
def _resize(s: Static) -> Kernel:
    sizes_only = unknown(s, (3,)) and not unknown(s, (2,)) and (
        len(s.in_types) < 3 or s.in_types[2] is None or s.inp(2).numel == 0)
    need = (1, 2) if s.attrs["coordinate_transformation_mode"] == "tf_crop_and_resize" \
        else (2,)
    if unknown(s, need) or (unknown(s, (3,)) and not sizes_only):
        return by_value(s, (1, 2, 3), _resize)
    x_t = s.inp(0)
    rank = x_t.rank
    attrs = s.attrs
    out_shape = s.out().shape
    axes = list(range(rank)) if attrs.get("axes") is None else [
        int(a) % rank for a in attrs["axes"]]
    scales = _scales(s, axes, out_shape)
    ctm = attrs["coordinate_transformation_mode"]
    rois = [(0.0, 1.0)] * rank
    if ctm == "tf_crop_and_resize":
        roi = s.const(1)
        if roi is None:
            raise UnsupportedError("the roi of Resize must be known before the run")
        flat = [float(v) for v in roi.reshape(-1)]
        for j, a in enumerate(axes):
            rois[a] = (flat[j], flat[len(axes) + j])
    if not x_t.dtype.is_float and attrs["mode"] != "nearest":
        raise UnsupportedError(f"Resize mode={attrs['mode']} of {x_t.dtype.value} (integer "
                               "inputs take mode=nearest)")
    fill = float(attrs.get("extrapolation_value", 0.0))
    dev, dt = s.device, torch_dtype(x_t.dtype)
    steps = []
    for a in axes:
        n_in, n_out = x_t.shape[a], out_shape[a]
        if math.isclose(scales[a], 1.0) and n_in == n_out and rois[a] == (0.0, 1.0):
            continue  # the identity, as the reference skips it
        if n_out == 0 or n_in == 0:
            raise UnsupportedError(f"Resize of the empty axis {a} ({x_t.shape} to "
                                   f"{out_shape})")
        idx, w, extrap = axis_taps(n_in, n_out, scales[a], attrs, rois[a])
        view = [1] * rank
        view[a] = n_out
        cols = [torch.from_numpy(np.ascontiguousarray(idx[:, j])).to(s.device)
                for j in range(idx.shape[1])]
        weights = None if idx.shape[1] == 1 else [
            torch.from_numpy(np.ascontiguousarray(w[:, j])).view(view).to(dev, dt)
            for j in range(w.shape[1])]
        mask = None if extrap is None or not extrap.any() else \
            torch.from_numpy(extrap).view(view).to(s.device)
        steps.append((a, cols, weights, mask))

    def k(x: torch.Tensor, *_: Any) -> tuple:
        for a, cols, weights, mask in steps:
            if weights is None:
                y = x.index_select(a, cols[0])
            else:
                y = x.index_select(a, cols[0]) * weights[0]
                for c, wt in zip(cols[1:], weights[1:]):
                    y = y + x.index_select(a, c) * wt
            if mask is not None:
                y = y.masked_fill(mask, fill)
            x = y
        return (x if steps else x.clone(),)

    return k


_GRID_MODES = {"linear": "bilinear", "nearest": "nearest", "cubic": "bicubic"}


@LOWERINGS.register("GridSample")
def _grid_sample(s: Static) -> Kernel:
    """``torch.nn.functional.grid_sample``, which takes the same normalized coordinates
    (x first), padding modes and ``align_corners``: 2 or 3 spatial axes (cubic: 2, and not
    with border padding)."""
    r = s.inp(0).rank - 2
    mode = _GRID_MODES[str(s.attrs["mode"])]
    if r not in (2, 3) or (r == 3 and mode == "bicubic"):
        raise UnsupportedError(f"GridSample mode={s.attrs['mode']} over {r} spatial axes "
                               "(the backend samples 2-D, and 3-D but for cubic)")
    pad = str(s.attrs["padding_mode"])
    if mode == "bicubic" and pad == "border":
        # torch clamps the sampling point before taking its taps, ONNX clamps each tap
        raise UnsupportedError("GridSample mode=cubic with padding_mode=border (torch's "
                               "border keeps the point inside, ONNX's each of its taps)")
    corners = bool(s.attrs.get("align_corners", 0))
    f = torch.nn.functional.grid_sample
    return lambda x, g: (f(x, g.to(x.dtype), mode=mode, padding_mode=pad,
                           align_corners=corners),)


@LOWERINGS.register("Col2Im")
def _col2im(s: Static) -> Kernel:
    """``torch.nn.functional.fold`` of one or two spatial axes (one as a row of height 1),
    onto the padded image, then cropped (ONNX's pads may differ at the two ends; fold's are
    equal); ``image_shape`` and ``block_shape`` known before the run."""
    if unknown(s, (1, 2)):
        return by_value(s, (1, 2), _col2im)
    image = [int(v) for v in np.asarray(s.const(1)).reshape(-1)]
    block = [int(v) for v in np.asarray(s.const(2)).reshape(-1)]
    dil, pads, strides, _ = col2im_geometry(s.attrs, image, block)
    k = len(image)
    if k > 2:
        raise UnsupportedError(f"Col2Im of {k} spatial axes: the backend folds one or two "
                               "(torch.nn.functional.fold)")
    lo, hi = pads[:k], pads[k:]
    if k == 1:  # a row of height 1
        image, block, dil, strides, lo, hi = ([1, *image], [1, *block], [1, *dil],
                                              [1, *strides], [0, *lo], [0, *hi])
    size = (image[0] + lo[0] + hi[0], image[1] + lo[1] + hi[1])
    crop = (slice(lo[0], lo[0] + image[0]), slice(lo[1], lo[1] + image[1]))
    fold = torch.nn.functional.fold
    one = k == 1

    def kernel(x: torch.Tensor, *_: Any) -> tuple:
        y = fold(x, size, tuple(block), dilation=tuple(dil), stride=tuple(strides))
        y = y[(..., *crop)]
        return (y.squeeze(-2) if one else y.contiguous(),)

    return kernel
