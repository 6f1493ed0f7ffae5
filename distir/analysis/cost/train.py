"""Cost rules of the gradient ops added for automatic differentiation and of the kernels
a training step runs, with the profile families ``calibration/bench_train.py`` fits.

- ``Conv`` (2-D) and ``ConvGrad`` (each of ``dx`` and ``dw`` the program uses) cost the
  profile's ``conv``, ``conv_dgrad`` and ``conv_wgrad`` fits of the dtype where it has
  them (one group), or its ``conv_grouped``, ``conv_grouped_dgrad`` and
  ``conv_grouped_wgrad`` fits (more than one group: depthwise and ResNeXt-like
  convolutions, which cuDNN runs by other kernels), those of a channels-last input
  (``distir.analysis.layout``) by the ``_nhwc`` fits of the same (``conv_nhwc``,
  ``conv_grouped_nhwc_dgrad``, ...) where the profile has them, plus the copies PyTorch
  makes of a view not dense in the kernels' format (``input_copies_time``: CvT's class
  token makes its image a slice of the tokens; a channel split), with ``conv_features``
  (the forward's implicit GEMM ``m = N * output pixels``, ``n = M``, ``k = C / group *
  kernel size``, ``window`` the kernel size, ``stride``, ``batch``, ``cin`` per group,
  ``pixels`` per image, ``groups``, ``bytes`` of x, w and y): cuDNN's kernels (TF32 for float32, as
  PyTorch allows by default) differ from a plain product of those dimensions, and a
  depthwise one's gradients from it by several times. Without a fit,
  ``ConvGrad`` is two implicit GEMMs with the forward's dimensions: ``dx`` ``(N * input
  pixels) x (C / group) x (M * kernel size)`` and ``dw`` ``M x (C / group * kernel size) x
  (N * output pixels)``; a result the program never uses is not computed (``skips_unused``,
  as the lowering skips it).
- ``MaxPoolGrad`` runs the pool with indices and then its backward (``max_pool2d``'s
  indices are not kept by the forward pool): the ``maxpool_grad`` fit (measured on that
  lowering), else two memory-bound kernels, the pool's (``x`` read, ``dy``-sized results
  written) and the backward's (``dy`` read, ``dx`` written).
  ``AveragePoolGrad``: ``avgpool_grad`` (its channels and stride as features,
  ``compute.pool_features``; measured on pools that do not count their pads, which the
  backend differentiates through autograd: pools that count them run
  ``aten.avg_pool2d_backward``, somewhat faster, and are priced alike), else one kernel
  reading ``dy`` and writing ``dx``. One FLOP per window element of ``dy``.
- ``BatchNormGrad``, ``LayerNormGrad``, ``SoftmaxGrad`` and ``LogSoftmaxGrad`` are one
  memory-bound kernel each over their inputs and results, 8 FLOPs per element, priced by
  the first family the profile fits of ``batchnorm_grad``; ``layernorm_grad``, then
  ``layernorm``; ``softmax_grad``, then ``softmax``; else the ``elementwise`` fit. The
  batch normalizations' fits (``norm_time``) also see the channel count and the pixels per
  image: their per-channel reductions run slower with few channels of many pixels; the
  layer norms' see the normalized width (``compute.row_features``).
"""

from __future__ import annotations

from typing import Any

from distir.analysis.cost import COST_RULES, OpCost, main_dtype, tensor_bytes
from distir.analysis.cost.compute import _products, pool_features, pool_window, row_features
from distir.analysis.hardware import Hardware, matmul_features, rowwise_features
from distir.analysis.layout import COPIED_INPUTS, MEMORY_FORMAT
from distir.ir.types import TensorType


def _prod(xs: tuple[int, ...]) -> int:
    p = 1
    for v in xs:
        p *= v
    return p


def conv_features(m: int, n: int, k: int, nbytes: float, window: int, stride: int,
                  batch: int, cin: int, pixels: int, groups: int = 1) -> dict[str, float]:
    """The features of a convolution fit: the forward's implicit-GEMM ``m``, ``n``, ``k``
    and their products (``matmul_features``), ``bytes`` of ``x``, ``w`` and ``y``, the
    kernel's ``window`` (elements), the largest ``stride``, the ``batch``, the input
    channels per group ``cin``, the output ``pixels`` per image and the ``groups``."""
    x = matmul_features(m, n, k, 1)
    x.update(bytes=float(nbytes), window=float(window), stride=float(stride),
             batch=float(batch), cin=float(cin), pixels=float(pixels), groups=float(groups))
    return x


def kernel_time(hw: Hardware, families: tuple[str, ...], nbytes: float, flops: float,
                dt: str, features: dict[str, float] | None = None) -> float:
    """A memory-bound kernel priced by the first of ``families`` the profile fits (key
    ``any``; ``features`` as ``Hardware.kernel_time`` takes them), else by
    ``Hardware.memory_time`` (the ``elementwise`` fit or the roofline)."""
    for fam in families:
        if hw.has_kernel_fit(fam):
            return hw.kernel_time(fam, nbytes, flops, dt, features)
    return hw.memory_time(nbytes, flops, dt)


def norm_time(hw: Hardware, family: str, x: TensorType, nbytes: float, flops: float,
              dt: str) -> float | None:
    """A batch normalization's kernel (``batchnorm``, ``batchnorm_grad``) by the profile's
    fit with ``bytes``, ``channels`` (axis 1 of ``x``) and ``spatial`` (the pixels per
    image), as ``calibration.bench_train.norm_features`` measured them, for ``dt`` (the
    dtype's own fit, else ``any``'s, ...: profiles fit these families per dtype since the
    training families were, and a lookup of ``any`` alone missed them); ``None`` without
    a fit."""
    feats = {"bytes": float(nbytes), "channels": float(x.shape[1] if x.rank > 1 else 1),
             "spatial": float(_prod(x.shape[2:]))}
    t = hw.fitted_kernel_time(family, dt, feats)
    if t is None:
        return None
    return max(t, hw.launch_overhead + flops / hw.peak(dt))


def input_copies_time(hw: Hardware, ins: tuple, attrs: dict[str, Any]) -> float:
    """The copies PyTorch makes of a convolution's inputs before its kernels (``attrs``'
    ``layout.COPIED_INPUTS``, which the simulator sets: views not dense in the format the
    kernels run in), or of a reshape's input that no view can give. A copy along the axis
    the format keeps innermost (channels for channels-last, else the last) streams like an
    elementwise kernel; one that transposes (an NCHW gradient made channels-last, a 1-D
    convolution's transposed token tensor made ``[N, C, L]``) is priced by the profile's
    ``copy`` fit, with its rows' lengths, where it has one."""
    total = 0.0
    last = attrs.get(MEMORY_FORMAT) == "channels_last"
    for i, inner_from in attrs.get(COPIED_INPUTS) or ():
        t = ins[i] if i < len(ins) else None
        if not isinstance(t, TensorType) or t.rank < 1:
            continue
        inner_to = 1 if last else t.rank - 1
        nbytes = 2.0 * t.size_bytes  # read once, written once
        dt = t.dtype.value
        if inner_from != inner_to and hw.has_kernel_fit("copy"):
            total += hw.kernel_time("copy", nbytes, 0.0, dt, rowwise_features(
                nbytes, t.shape[inner_to], t.shape[inner_from]))
        else:
            total += hw.memory_time(nbytes, 0.0, dt)
    return total


def conv_fit_time(hw: Hardware, family: str, x: TensorType, w: TensorType, y: TensorType,
                  attrs: dict[str, Any]) -> float | None:
    """The fitted time of a 2-D convolution kernel of ``family`` (``conv``, ``conv_dgrad``,
    ``conv_wgrad``; of more than one group, the profile's ``conv_grouped...`` family of the
    same role) with forward input ``x``, weight ``w`` and output ``y``; ``None`` where the
    profile has no such fit for the dtype or the convolution is neither 1-D nor 2-D. Where
    ``x`` is channels-last (``attrs``' ``layout.MEMORY_FORMAT``, which the simulator sets),
    the family's ``_nhwc`` fit (``conv_nhwc``, ``conv_grouped_nhwc_dgrad``, ...) where the
    profile has one for the dtype, else the NCHW one. A 1-D convolution takes the
    profile's ``conv1d`` family of the same role (dense and grouped in one), where it has
    one (``calibration.bench_train.conv1d_shapes``: speech models' layers, which cuDNN runs
    otherwise than 2-D ones: SEW-D's positional convolution's input gradient took 9.3 ms
    at 8 clips and 0.5 ms at 12 on an H200); PyTorch runs it on contiguous tensors,
    having copied a strided input (``input_copies_time``)."""
    groups = int(attrs.get("group", 1) or 1)
    if x.rank == 3:
        family = family.replace("conv", "conv1d", 1)
    elif x.rank != 4:
        return None
    elif groups != 1:
        family = family.replace("conv", "conv_grouped", 1)
    f = None
    if x.rank == 4 and attrs.get(MEMORY_FORMAT) == "channels_last":
        role = family[-6:] if family.endswith(("_dgrad", "_wgrad")) else ""
        f = hw.fit(f"{family[:len(family) - len(role)]}_nhwc{role}", x.dtype.value)
    if f is None:
        f = hw.fit(family, x.dtype.value)
    if f is None:
        return None
    window = _prod(w.shape[2:])
    stride = max([int(s) for s in (attrs.get("strides") or [1])] or [1])
    m = x.shape[0] * _prod(y.shape[2:])
    nbytes = float(x.size_bytes + w.size_bytes + y.size_bytes)
    feats = conv_features(m, w.shape[0], w.shape[1] * window, nbytes, window, stride,
                          x.shape[0], w.shape[1], _prod(y.shape[2:]), groups)
    return max(f(feats), hw.launch_overhead)


@COST_RULES.register("ConvGrad", skips_unused=True)
def conv_grad(op_type: str, ins: tuple, outs: tuple, attrs: dict[str, Any],
              hw: Hardware) -> OpCost:
    x, w, dy = ins
    window = _prod(w.shape[2:])
    n_out_pix = x.shape[0] * _prod(dy.shape[2:])
    need = (outs[0] is not None, len(outs) > 1 and outs[1] is not None)
    dims: list[tuple[int, ...]] = []
    if need[0]:  # dx: dy (pixels x M) @ w (M x C/g * window)
        dims.append((n_out_pix, w.shape[1] * window, w.shape[0]))
    if need[1]:  # dw: dy^T (M x pixels) @ cols (pixels x k)
        dims.append((w.shape[0], w.shape[1] * window, n_out_pix))
    analytic = _products(hw, dims, x)
    copies = input_copies_time(hw, ins, attrs)
    fitted = [conv_fit_time(hw, fam, x, w, dy, attrs)
              for fam, on in (("conv_dgrad", need[0]), ("conv_wgrad", need[1])) if on]
    if fitted and all(t is not None for t in fitted):
        return OpCost(sum(t for t in fitted if t is not None) + copies, analytic.flops,
                      analytic.bytes)
    return OpCost(analytic.seconds + copies, analytic.flops, analytic.bytes) if copies \
        else analytic


@COST_RULES.register("MaxPoolGrad", "AveragePoolGrad")
def pool_grad(op_type: str, ins: tuple, outs: tuple, attrs: dict[str, Any],
              hw: Hardware) -> OpCost:
    x, dy = ins[0], ins[1]
    flops = float(dy.numel * pool_window(x, attrs))
    dt = main_dtype(ins, outs)
    family = "maxpool_grad" if op_type == "MaxPoolGrad" else "avgpool_grad"
    nbytes = float(tensor_bytes(ins) + tensor_bytes(outs))
    if hw.has_kernel_fit(family):
        feats = pool_features(x, attrs, nbytes) if family == "avgpool_grad" else None
        return OpCost(hw.kernel_time(family, nbytes, flops, dt, feats), flops, nbytes)
    if op_type == "AveragePoolGrad":  # dy read, dx written
        moved = float(dy.size_bytes + outs[0].size_bytes) if outs[0] is not None else 0.0
        return OpCost(hw.memory_time(moved, flops, dt), flops, moved)
    # the pool with indices (x read; values and int64 indices written), then its backward
    pool_bytes = float(x.size_bytes + dy.size_bytes + dy.numel * 8)
    back_bytes = float(dy.size_bytes + dy.numel * 8 + outs[0].size_bytes)
    secs = hw.memory_time(pool_bytes, flops, dt) + hw.memory_time(back_bytes, dy.numel, dt)
    return OpCost(secs, flops + dy.numel, pool_bytes + back_bytes)


_FAMILIES = {"BatchNormGrad": ("batchnorm_grad",),
             "LayerNormGrad": ("layernorm_grad", "layernorm"),
             "SoftmaxGrad": ("softmax_grad", "softmax"),
             "LogSoftmaxGrad": ("softmax_grad", "softmax")}


@COST_RULES.register(*_FAMILIES)
def normalization_grad(op_type: str, ins: tuple, outs: tuple, attrs: dict[str, Any],
                       hw: Hardware) -> OpCost:
    nbytes = tensor_bytes(ins) + tensor_bytes(outs)
    flops = 8.0 * ins[-1].numel
    dt = main_dtype(ins, outs)
    if op_type == "BatchNormGrad":
        t = norm_time(hw, "batchnorm_grad", ins[0], nbytes, flops, dt)
        if t is not None:
            return OpCost(t, flops, nbytes)
    return OpCost(kernel_time(hw, _FAMILIES[op_type], nbytes, flops, dt,
                              row_features(op_type, ins, outs, attrs, nbytes)),
                  flops, nbytes)
