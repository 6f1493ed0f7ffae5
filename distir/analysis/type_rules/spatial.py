"""Type rules of ops that resample or rearrange the spatial axes: Pad, Resize, GridSample,
DepthToSpace, SpaceToDepth, Col2Im.

Semantics are ONNX opset 21's (Resize: opset 19's, the version in force at 21); every result
lives on the device of the inputs. Pad's ``pads`` and ``axes``, and Resize's ``scales`` or
``sizes``, fix the result shape: they must be known (``const_ints``'s error otherwise).
"""

from __future__ import annotations

import math
from typing import Any

from distir.analysis.rules import TYPE_RULES
from distir.analysis.type_rules._util import (
    const_array,
    const_ints,
    fail,
    norm_axes,
    tensor,
)
from distir.ir.types import DType, TensorType

__all__ = ["resize_shape", "RESIZE_MODES", "COORDINATE_MODES", "col2im_geometry"]

_PAD_MODES = ("constant", "reflect", "edge", "wrap")
RESIZE_MODES = ("nearest", "linear", "cubic")
COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",
                    "align_corners", "asymmetric", "tf_crop_and_resize")
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
_POLICIES = ("stretch", "not_larger", "not_smaller")


@TYPE_RULES.register("Pad")
def pad(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    """Each padded axis grows by its begin and end pads (negative pads crop)."""
    x = tensor(args[0], "data")
    pt = tensor(args[1], "pads")
    if pt.dtype is not DType.Int64 or pt.rank != 1:
        raise fail(f"pads must be a 1-D Int64 tensor, got {pt}")
    pads = const_ints(args[1], "pads")
    axes_in = args[3] if len(args) > 3 else None
    axes = (list(range(x.rank)) if axes_in is None
            else norm_axes(const_ints(axes_in, "the axes input"), x.rank))
    if len(pads) != 2 * len(axes):
        raise fail(f"pads {pads} must have 2 entries per padded axis ({len(axes)} axes: the "
                   "begins, then the ends)")
    if len(args) > 2 and args[2] is not None:
        c = tensor(args[2], "constant_value")
        if c.dtype != x.dtype or c.numel != 1:
            raise fail(f"constant_value must be one {x.dtype.value} element, got {c}")
    mode = attrs.get("mode", "constant")
    if mode not in _PAD_MODES:
        raise fail(f"mode must be one of {', '.join(_PAD_MODES)}, got {mode!r}")
    shape = list(x.shape)
    n = len(axes)
    for i, a in enumerate(axes):
        shape[a] += pads[i] + pads[n + i]
        if shape[a] < 0:
            raise fail(f"pads {pads} crop axis {a} of {x.shape} below size 0")
        if mode != "constant" and x.shape[a] == 0 and shape[a] > 0:
            raise fail(f"mode={mode} cannot pad the empty axis {a} of {x.shape}")
    return (x.with_shape(tuple(shape)),)


def _given(args: tuple, i: int) -> bool:
    """Whether Resize's optional input i is present and not empty (exporters write an empty
    tensor for an omitted input)."""
    if len(args) <= i or args[i] is None:
        return False
    return tensor(args[i]).numel > 0


def resize_shape(shape: tuple[int, ...], args: tuple, attrs: dict[str, Any],
                 ) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """Resize's result shape and the scale of every axis (1.0 where it is not resized), as
    the ONNX reference computes them: from ``scales``, ``floor(d * s)``; from ``sizes``,
    the sizes (``stretch``) or one scale for all ``axes``, the smallest (``not_larger``)
    or largest (``not_smaller``) of ``size / d``, with ``round_half_up(scale * d)``."""
    rank = len(shape)
    axes = list(range(rank)) if attrs.get("axes") is None else norm_axes(
        list(attrs["axes"]), rank)
    has_scales, has_sizes = _given(args, 2), _given(args, 3)
    if has_scales == has_sizes:
        raise fail("needs exactly one of scales and sizes (the other omitted or empty)")
    scales = [1.0] * rank
    out = list(shape)
    if has_scales:
        vals = [float(v) for v in const_array(args[2], "scales").reshape(-1)]
        if len(vals) != len(axes):
            raise fail(f"scales {vals} must have one entry per resized axis ({len(axes)})")
        if any(not v > 0 for v in vals):
            raise fail(f"scales {vals} must be positive")
        for a, v in zip(axes, vals, strict=True):
            scales[a] = v
            out[a] = math.floor(v * shape[a])
        return tuple(out), tuple(scales)
    sizes = const_ints(args[3], "sizes")
    if len(sizes) != len(axes):
        raise fail(f"sizes {sizes} must have one entry per resized axis ({len(axes)})")
    if any(s < 0 for s in sizes) or any(shape[a] == 0 for a in axes):
        raise fail(f"sizes {sizes} must be non-negative and resize non-empty axes of {shape}")
    ratios = [s / shape[a] for a, s in zip(axes, sizes, strict=True)]
    policy = attrs.get("keep_aspect_ratio_policy", "stretch")
    if policy not in _POLICIES:
        raise fail(f"keep_aspect_ratio_policy must be one of {', '.join(_POLICIES)}, got "
                   f"{policy!r}")
    if policy == "stretch":
        for a, s, r in zip(axes, sizes, ratios, strict=True):
            scales[a], out[a] = r, s
        return tuple(out), tuple(scales)
    common = min(ratios) if policy == "not_larger" else max(ratios)
    for a in axes:
        scales[a] = common
        out[a] = int(common * shape[a] + 0.5)
    return tuple(out), tuple(scales)


@TYPE_RULES.register("Resize")
def resize(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    x = tensor(args[0], "X")
    for name, allowed in (("mode", RESIZE_MODES),
                          ("coordinate_transformation_mode", COORDINATE_MODES),
                          ("nearest_mode", _NEAREST_MODES)):
        if attrs.get(name) not in allowed:
            raise fail(f"{name} must be one of {', '.join(allowed)}, got {attrs.get(name)!r}")
    if attrs.get("antialias", 0) and attrs.get("mode") == "nearest":
        raise fail("antialias=1 is for the linear and cubic modes, not nearest")
    if attrs.get("coordinate_transformation_mode") == "tf_crop_and_resize" and \
            not _given(args, 1):
        raise fail("coordinate_transformation_mode=tf_crop_and_resize needs the roi input")
    if _given(args, 2) and not tensor(args[2], "scales").dtype.is_float:
        raise fail(f"scales must be a float tensor, got {tensor(args[2])}")
    if _given(args, 3) and tensor(args[3], "sizes").dtype is not DType.Int64:
        raise fail(f"sizes must be an Int64 tensor, got {tensor(args[3])}")
    shape, _ = resize_shape(x.shape, args, attrs)
    return (x.with_shape(shape),)


@TYPE_RULES.register("GridSample")
def grid_sample(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    """X ``(N, C, D1, ..., Dr)`` sampled at grid ``(N, E1, ..., Er, r)``: ``(N, C, E1, ...,
    Er)`` in X's dtype."""
    x, g = tensor(args[0], "X"), tensor(args[1], "grid")
    r = x.rank - 2
    if r < 1 or g.rank != x.rank or g.shape[0] != x.shape[0] or g.shape[-1] != r:
        raise fail(f"grid must be (N, E1, ..., E{max(r, 1)}, {max(r, 1)}) for X {x.shape}, "
                   f"got {g.shape}")
    if not g.dtype.is_float:
        raise fail(f"grid must be a float tensor, got {g}")
    for name, allowed in (("mode", ("linear", "nearest", "cubic")),
                          ("padding_mode", ("zeros", "border", "reflection"))):
        if attrs.get(name) not in allowed:
            raise fail(f"{name} must be one of {', '.join(allowed)}, got {attrs.get(name)!r}")
    return (x.with_shape(x.shape[:2] + g.shape[1:-1]),)


def _nchw(op_type: str, args: tuple, attrs: dict[str, Any]) -> tuple[TensorType, int]:
    x = tensor(args[0])
    b = attrs.get("blocksize")
    if x.rank != 4:
        raise fail(f"the input must be (N, C, H, W), got {x.shape}")
    if not isinstance(b, int) or b < 1:
        raise fail(f"blocksize must be a positive int, got {b!r}")
    return x, b


@TYPE_RULES.register("DepthToSpace")
def depth_to_space(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    x, b = _nchw(op_type, args, attrs)
    n, c, h, w = x.shape
    if c % (b * b):
        raise fail(f"the {c} channels of {x.shape} are not a multiple of blocksize^2 = {b * b}")
    if attrs.get("mode", "DCR") not in ("DCR", "CRD"):
        raise fail(f"mode must be DCR or CRD, got {attrs.get('mode')!r}")
    return (x.with_shape((n, c // (b * b), h * b, w * b)),)


@TYPE_RULES.register("SpaceToDepth")
def space_to_depth(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    x, b = _nchw(op_type, args, attrs)
    n, c, h, w = x.shape
    if h % b or w % b:
        raise fail(f"the height and width of {x.shape} must be multiples of blocksize {b}")
    return (x.with_shape((n, c * b * b, h // b, w // b)),)


def col2im_geometry(attrs: dict[str, Any], image: list[int], block: list[int],
                    ) -> tuple[list[int], list[int], list[int], list[int]]:
    """``Col2Im``'s dilations, pads (begins, then ends), strides and the number of block
    positions along each spatial axis, from its attributes (ONNX's defaults: 1, 0, 1) and
    its ``image_shape`` and ``block_shape``; raises the rule's error where they disagree."""
    k = len(image)
    if k < 1 or len(block) != k:
        raise fail(f"image_shape {image} and block_shape {block} must name the same spatial "
                   "axes (at least one)")
    dil = list(attrs.get("dilations") or [1] * k)
    pads = list(attrs.get("pads") or [0] * (2 * k))
    strides = list(attrs.get("strides") or [1] * k)
    if len(dil) != k or len(strides) != k or len(pads) != 2 * k:
        raise fail(f"dilations {dil} and strides {strides} need {k} entries, pads {pads} "
                   f"{2 * k}")
    if min(dil + strides + block + image) < 1 or min(pads) < 0:
        raise fail(f"image_shape {image}, block_shape {block}, dilations {dil} and strides "
                   f"{strides} must be positive and pads {pads} not negative")
    counts = []
    for i in range(k):
        span = image[i] + pads[i] + pads[k + i] - dil[i] * (block[i] - 1) - 1
        if span < 0:
            raise fail(f"block {block[i]} (dilation {dil[i]}) is larger than axis {i} of "
                       f"image_shape {image} with its pads")
        counts.append(span // strides[i] + 1)
    return dil, pads, strides, counts


@TYPE_RULES.register("Col2Im")
def col2im(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    """Columns ``(N, C * prod(block_shape), L)`` summed into an image ``(N, C,
    *image_shape)`` (``torch.nn.functional.fold``): ``L`` is the number of block positions
    the strides, pads and dilations give; ``image_shape`` and ``block_shape`` must be
    known."""
    x = tensor(args[0], "input")
    image = const_ints(args[1], "image_shape")
    block = const_ints(args[2], "block_shape")
    if x.rank != 3:
        raise fail(f"the input must be (N, C x prod(block_shape), L), got {x.shape}")
    _, _, _, counts = col2im_geometry(attrs, image, block)
    per = math.prod(block)
    if x.shape[1] % per:
        raise fail(f"the {x.shape[1]} rows of {x.shape} are not a multiple of the block's "
                   f"{per} positions")
    if x.shape[2] != math.prod(counts):
        raise fail(f"the input has {x.shape[2]} columns, image_shape {image} and block_shape "
                   f"{block} give {math.prod(counts)} ({' x '.join(map(str, counts))})")
    return (x.with_shape((x.shape[0], x.shape[1] // per, *image)),)
