"""Numpy rules of the training ops: the reference semantics of gradients, losses and
optimizers.

Conventions (the type rules in ``distir.analysis.type_rules.train`` check the shapes):

- Gradients have the dtype of their inputs; where an input was broadcast in the forward op
  (``MatMul``'s batch dimensions, ``Gemm``'s ``C``), its gradient is summed over the
  broadcast dimensions, so it has the input's shape.
- Losses reduce by ``"sum"`` by default, so that the gradients of microbatches and of
  data-parallel replicas add up to the full-batch gradient; ``"mean"`` divides the sum by
  the number of terms (elements of ``p`` for MSE, labels for cross entropy).
- ``MSELoss(p, y)`` is ``0.5 * sum((p - y)^2)`` (note the 0.5: ``torch.nn.MSELoss`` has
  none) and ``MSELossGrad(p, y)`` is ``p - y``, its exact gradient.
- ``SoftmaxCrossEntropyLoss(logits, labels)``: ``logits`` has shape ``(..., C)`` with the
  classes on the last axis; ``labels`` has shape ``(...)`` and holds class indices in
  ``[0, C)`` (Int64 or Int32). The loss is ``-sum(log_softmax(logits)[..., labels])`` over
  all positions ``...`` (``torch.nn.functional.cross_entropy`` of the flattened logits with
  ``reduction="sum"``); its gradient is ``softmax(logits) - one_hot(labels)``.
- ``SGDOptimizer`` is ``w - lr * dw`` (``torch.optim.SGD`` without momentum).
- ``AdamOptimizer(w, dw, m, v, step)`` is one step of ``torch.optim.Adam`` (no amsgrad, not
  maximizing, weight decay as L2 added to the gradient): ``step`` is the number of this step,
  1 for the first; it returns the new ``w``, ``m``, ``v``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from distir.analysis.rules import NUMPY_RULES
from distir.errors import ExecutionError

__all__ = ["unbroadcast", "erf"]

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_TANH_C = 0.044715


def unbroadcast(g: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``g`` summed over the dimensions along which a tensor of ``shape`` was broadcast."""
    while g.ndim > len(shape):
        g = g.sum(axis=0)
    axes = tuple(i for i, s in enumerate(shape) if s == 1 and g.shape[i] != 1)
    if axes:
        g = g.sum(axis=axes, keepdims=True)
    return g


def erf(x: np.ndarray) -> np.ndarray:
    """The error function, elementwise, in float64."""
    try:
        from scipy.special import erf as _erf  # a dependency of scikit-learn
    except ImportError:  # pragma: no cover - exact but slower
        return np.vectorize(math.erf, otypes=[np.float64])(x)
    return _erf(np.asarray(x, dtype=np.float64))


def _compute_dtype(dt: np.dtype) -> np.dtype:
    """Half-precision inputs are computed in float32, like PyTorch's CPU kernels."""
    return np.promote_types(dt, np.float32)


def _swap(x: np.ndarray) -> np.ndarray:
    return np.swapaxes(x, -1, -2)


@NUMPY_RULES.register("MatMulGrad")
def matmul_grad(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    a, b, dy = (np.asarray(x) for x in args)
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    dy2 = dy[..., None] if b.ndim == 1 else dy
    dy2 = dy2[..., None, :] if a.ndim == 1 else dy2
    da = unbroadcast(np.matmul(dy2, _swap(b2)), a2.shape).reshape(a.shape)
    db = unbroadcast(np.matmul(_swap(a2), dy2), b2.shape).reshape(b.shape)
    return (da.astype(a.dtype, copy=False), db.astype(b.dtype, copy=False))


@NUMPY_RULES.register("GemmGrad")
def gemm_grad(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    a, b = np.asarray(args[0]), np.asarray(args[1])
    c = np.asarray(args[2]) if len(args) == 4 and args[2] is not None else None
    dy = np.asarray(args[-1])
    alpha, beta = attrs["alpha"], attrs["beta"]
    a_op = a.T if attrs["transA"] else a
    b_op = b.T if attrs["transB"] else b
    da = alpha * (dy @ b_op.T)  # the gradient of op(A)
    db = alpha * (a_op.T @ dy)  # the gradient of op(B)
    outs = [(da.T if attrs["transA"] else da).astype(a.dtype, copy=False),
            (db.T if attrs["transB"] else db).astype(b.dtype, copy=False)]
    if n_out == 3:
        if c is None:
            raise ExecutionError("three results (da, db, dc) need the inputs a, b, c, dy")
        outs.append((beta * unbroadcast(dy, c.shape)).reshape(c.shape).astype(c.dtype))
    return tuple(outs)


@NUMPY_RULES.register("ReluGrad")
def relu_grad(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    x, dy = np.asarray(args[0]), np.asarray(args[1])
    return (np.where(x > 0, dy, np.zeros((), dy.dtype)).astype(dy.dtype, copy=False),)


@NUMPY_RULES.register("GeluGrad")
def gelu_grad(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    """The derivative of ``Gelu(x)`` times ``dy``: ``Phi(x) + x * phi(x)`` for
    ``approximate="none"``; the derivative of ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715
    x^3)))`` for ``"tanh"``. Computed in float64, returned in ``dy``'s dtype."""
    x, dy = np.asarray(args[0]), np.asarray(args[1])
    x64 = x.astype(np.float64)
    if attrs["approximate"] == "tanh":
        t = np.tanh(_SQRT_2_OVER_PI * (x64 + _GELU_TANH_C * x64 ** 3))
        d = 0.5 * (1.0 + t) + 0.5 * x64 * (1.0 - t * t) * _SQRT_2_OVER_PI * (
            1.0 + 3.0 * _GELU_TANH_C * x64 * x64)
    elif attrs["approximate"] == "none":
        cdf = 0.5 * (1.0 + erf(x64 / math.sqrt(2.0)))
        pdf = np.exp(-0.5 * x64 * x64) / math.sqrt(2.0 * math.pi)
        d = cdf + x64 * pdf
    else:
        raise ExecutionError(f"approximate must be \"none\" or \"tanh\", got "
                             f"{attrs['approximate']!r}")
    return ((d * dy).astype(dy.dtype),)


def _reduce_scale(attrs: dict[str, Any], count: int) -> float:
    r = attrs["reduction"]
    if r == "sum":
        return 1.0
    if r == "mean":
        return 1.0 / max(count, 1)
    raise ExecutionError(f"reduction must be \"sum\" or \"mean\", got {r!r}")


@NUMPY_RULES.register("MSELoss")
def mse_loss(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    p, y = np.asarray(args[0]), np.asarray(args[1])
    d = (p - y).astype(_compute_dtype(p.dtype))
    loss = 0.5 * np.sum(d * d) * _reduce_scale(attrs, d.size)
    return (np.asarray(loss, dtype=p.dtype),)


@NUMPY_RULES.register("MSELossGrad")
def mse_loss_grad(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    p, y = np.asarray(args[0]), np.asarray(args[1])
    s = _reduce_scale(attrs, p.size)
    d = p - y
    return ((d if s == 1.0 else d * s).astype(p.dtype, copy=False),)


def _log_softmax_and_labels(logits: np.ndarray, labels: np.ndarray,
                            ) -> tuple[np.ndarray, np.ndarray]:
    """The log-softmax over the last axis (computed in at least float32) and the labels
    as int64 with a trailing axis, checked to lie in ``[0, C)``."""
    x = logits.astype(_compute_dtype(logits.dtype))
    z = x - x.max(axis=-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    lab = np.asarray(labels).astype(np.int64)
    n_classes = logits.shape[-1]
    if lab.size and (lab.min() < 0 or lab.max() >= n_classes):
        bad = lab[(lab < 0) | (lab >= n_classes)].reshape(-1)[0]
        raise ExecutionError(f"label {bad} is not a class index in [0, {n_classes})")
    return logp, lab[..., None]


@NUMPY_RULES.register("SoftmaxCrossEntropyLoss")
def softmax_xent(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    logits = np.asarray(args[0])
    logp, lab = _log_softmax_and_labels(logits, args[1])
    loss = -np.take_along_axis(logp, lab, axis=-1).sum() * _reduce_scale(attrs, lab.size)
    return (np.asarray(loss, dtype=logits.dtype),)


@NUMPY_RULES.register("SoftmaxCrossEntropyLossGrad")
def softmax_xent_grad(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    logits = np.asarray(args[0])
    logp, lab = _log_softmax_and_labels(logits, args[1])
    g = np.exp(logp)
    np.put_along_axis(g, lab, np.take_along_axis(g, lab, axis=-1) - 1, axis=-1)
    s = _reduce_scale(attrs, lab.size)
    return ((g if s == 1.0 else g * s).astype(logits.dtype),)


@NUMPY_RULES.register("SGDOptimizer")
def sgd(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    w, dw = np.asarray(args[0]), np.asarray(args[1])
    return ((w - attrs["lr"] * dw).astype(w.dtype, copy=False),)


@NUMPY_RULES.register("AdamOptimizer")
def adam(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    """One ``torch.optim.Adam`` step, in the order of operations of its single-tensor path:
    ``g = dw + weight_decay * w``; ``m += (1 - beta1) * (g - m)``; ``v = beta2 * v + (1 -
    beta2) * g * g``; ``w -= lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) +
    eps)``. Tensors are computed in ``w``'s dtype, the step-dependent scalars in float64."""
    w, dw, m, v = (np.asarray(x) for x in args[:4])
    step = float(np.asarray(args[4]).reshape(-1)[0])
    if step < 1:
        raise ExecutionError(f"step counts from 1 (the first step), got {step:g}")
    lr, beta1, beta2 = attrs["lr"], attrs["beta1"], attrs["beta2"]
    eps, wd = attrs["eps"], attrs["weight_decay"]
    dt = w.dtype
    g = dw + wd * w if wd != 0 else dw
    m_new = m + (1.0 - beta1) * (g - m)
    v_new = v * beta2 + (1.0 - beta2) * (g * g)
    step_size = lr / (1.0 - beta1 ** step)
    bc2_sqrt = (1.0 - beta2 ** step) ** 0.5
    denom = np.sqrt(v_new) / bc2_sqrt + eps
    w_new = w - step_size * (m_new / denom)
    return tuple(x.astype(dt, copy=False) for x in (w_new, m_new, v_new))


def _windows(kernel: list[int], strides: list[int], dil: list[int], out: tuple[int, ...],
             ) -> list[tuple[tuple[int, ...], tuple[slice, ...]]]:
    """Each kernel position (row-major) with the strided slice of the padded input that it
    reads for every output position."""
    res = []
    for k in np.ndindex(*kernel):
        sl = tuple(slice(ki * di, ki * di + si * (oi - 1) + 1, si)
                   for ki, di, si, oi in zip(k, dil, strides, out))
        res.append((k, sl))
    return res


def _padded(x: np.ndarray, kernel: list[int], strides: list[int], dil: list[int],
            pads: list[int], out: tuple[int, ...], fill: float) -> np.ndarray:
    """``x`` padded by ``pads`` (begin then end), and further at the end where the windows
    of ``out`` outputs reach past it (``ceil_mode``), with ``fill``."""
    n = len(kernel)
    widths = [(0, 0), (0, 0)]
    for i in range(n):
        reach = (out[i] - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1
        end = max(pads[n + i], reach - x.shape[2 + i] - pads[i])
        widths.append((pads[i], end))
    return np.pad(x, widths, constant_values=fill)


def _crop(xp: np.ndarray, pads: list[int], shape: tuple[int, ...]) -> np.ndarray:
    return xp[(slice(None), slice(None)) + tuple(
        slice(p, p + s) for p, s in zip(pads, shape[2:]))]


@NUMPY_RULES.register("ConvGrad")
def conv_grad(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    """``dx`` and ``dw`` of ``Conv(x, w)`` (groups, strides, dilations, explicit pads) given
    ``dy``, accumulated kernel position by kernel position in float64."""
    x, w, dy = (np.asarray(a) for a in args)
    g = int(attrs["group"])
    n_, c = x.shape[:2]
    m = w.shape[0]
    out = dy.shape[2:]
    kernel = list(w.shape[2:])
    strides, dil, pads = list(attrs["strides"]), list(attrs["dilations"]), list(attrs["pads"])
    xp = _padded(x.astype(np.float64), kernel, strides, dil, pads, out, 0.0)
    dxp = np.zeros_like(xp)
    dw = np.zeros(w.shape, np.float64)
    pix = int(np.prod(out))
    dyg = dy.astype(np.float64).reshape(n_, g, m // g, pix)
    w64 = w.astype(np.float64)
    lead = (slice(None), slice(None))
    for k, sl in _windows(kernel, strides, dil, out):
        xs = xp[lead + sl].reshape(n_, g, c // g, pix)
        dw[lead + k] = np.einsum("ngmp,ngcp->gmc", dyg, xs).reshape(m, c // g)
        wk = w64[lead + k].reshape(g, m // g, c // g)
        dxp[lead + sl] += np.einsum("ngmp,gmc->ngcp", dyg, wk).reshape(n_, c, *out)
    return (_crop(dxp, pads, x.shape).astype(x.dtype), dw.astype(w.dtype))


@NUMPY_RULES.register("MaxPoolGrad")
def max_pool_grad(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    """``dy`` routed to the first maximum (in row-major window order) of each window."""
    x, dy = np.asarray(args[0]), np.asarray(args[1])
    kernel, strides = list(attrs["kernel_shape"]), list(attrs["strides"])
    dil, pads = list(attrs["dilations"]), list(attrs["pads"])
    out = dy.shape[2:]
    xp = _padded(x.astype(np.float64), kernel, strides, dil, pads, out, -np.inf)
    wins = _windows(kernel, strides, dil, out)
    lead = (slice(None), slice(None))
    y = np.full(dy.shape, -np.inf)
    for _, sl in wins:
        y = np.maximum(y, xp[lead + sl])
    dxp = np.zeros_like(xp)
    taken = np.zeros(dy.shape, bool)
    d64 = dy.astype(np.float64)
    for _, sl in wins:
        hit = (xp[lead + sl] == y) & ~taken
        taken |= hit
        dxp[lead + sl] += np.where(hit, d64, 0.0)
    return (_crop(dxp, pads, x.shape).astype(x.dtype),)


@NUMPY_RULES.register("AveragePoolGrad")
def average_pool_grad(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    """``dy`` divided by each window's count and spread over the window. The count is the
    number of window positions inside the input (``count_include_pad=0``) or inside the
    padded input (``1``); positions past the padding (``ceil_mode``) never count."""
    x, dy = np.asarray(args[0]), np.asarray(args[1])
    kernel, strides, pads = list(attrs["kernel_shape"]), list(attrs["strides"]), \
        list(attrs["pads"])
    dil = [1] * len(kernel)
    out = dy.shape[2:]
    wins = _windows(kernel, strides, dil, out)
    lead = (slice(None), slice(None))
    count = _window_counts(x.shape, kernel, strides, dil, pads, out, wins,
                           bool(attrs["count_include_pad"]))
    share = dy.astype(np.float64) / count
    xp = _padded(np.zeros(x.shape), kernel, strides, dil, pads, out, 0.0)
    for _, sl in wins:
        xp[lead + sl] += share
    return (_crop(xp, pads, x.shape).astype(x.dtype),)


def _window_counts(shape: tuple[int, ...], kernel: list[int], strides: list[int],
                   dil: list[int], pads: list[int], out: tuple[int, ...], wins: list,
                   include_pad: bool) -> np.ndarray:
    """Each window's count of an average pool over an input of ``shape``: its positions
    inside the input, or inside the padded input with ``include_pad``; positions past the
    padding (``ceil_mode``) never count. At least 1."""
    n = len(kernel)
    ones = np.ones((1, 1) + tuple(shape[2:]))
    if include_pad:
        ones = np.pad(ones, [(0, 0), (0, 0)] + [(pads[i], pads[n + i]) for i in range(n)],
                      constant_values=1.0)
        mask = _padded(ones, kernel, strides, dil, [0] * (2 * n), out, 0.0)
    else:
        mask = _padded(ones, kernel, strides, dil, pads, out, 0.0)
    lead = (slice(None), slice(None))
    return np.maximum(sum(mask[lead + sl] for _, sl in wins), 1.0)


@NUMPY_RULES.register("AveragePool")
def average_pool(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    """``onnx.reference``'s kernel, except where ``ceil_mode`` keeps a window that reaches
    past the padded input (HF EfficientNet's last pool: a window of 2560 over a 7 x 7 map),
    which onnx 1.23's reference averages wrongly: there, the mean over each window's
    positions inside the input, divided by the count ``AveragePoolGrad`` uses
    (``_window_counts``), as onnxruntime and PyTorch compute it."""
    from distir.analysis.numpy_rules.onnx_ops import onnx_op
    from distir.analysis.type_rules.nn import spatial_out

    x = np.asarray(args[0])
    n = x.ndim - 2
    if not attrs.get("ceil_mode", 0) or attrs.get("auto_pad", "NOTSET") != "NOTSET":
        return onnx_op(op_type, args, attrs, n_out)
    kernel = [int(k) for k in attrs["kernel_shape"]]
    strides = [int(v) for v in attrs.get("strides") or [1] * n]
    dil = [int(v) for v in attrs.get("dilations") or [1] * n]
    pads = [int(v) for v in attrs.get("pads") or [0] * (2 * n)]
    out = spatial_out(x.shape, tuple(kernel), attrs, True)
    if not any((out[i] - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 >
               x.shape[2 + i] + pads[i] + pads[n + i] for i in range(n)):
        return onnx_op(op_type, args, attrs, n_out)
    xp = _padded(x.astype(np.float64), kernel, strides, dil, pads, out, 0.0)
    lead = (slice(None), slice(None))
    wins = _windows(kernel, strides, dil, out)
    total = sum(xp[lead + sl] for _, sl in wins)
    count = _window_counts(x.shape, kernel, strides, dil, pads, out, wins,
                           bool(attrs.get("count_include_pad", 0)))
    return ((total / count).astype(x.dtype),)


@NUMPY_RULES.register("LayerNormGrad")
def layer_norm_grad(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    """Statistics over the axes from ``axis`` on (biased variance, ``epsilon`` inside the
    square root), recomputed from ``x`` in float64: ``xhat = (x - mean) * rstd``,
    ``dx = rstd * (g - mean(g) - xhat * mean(g * xhat))`` with ``g = dy * scale``;
    ``dscale = sum(dy * xhat)`` and ``dbias = sum(dy)`` over the other axes (and the axes
    along which ``scale`` was broadcast)."""
    x, scale, dy = (np.asarray(a) for a in args)
    axes = tuple(range(attrs["axis"] % x.ndim, x.ndim))
    x64, d64 = x.astype(np.float64), dy.astype(np.float64)
    xc = x64 - x64.mean(axis=axes, keepdims=True)
    rstd = 1.0 / np.sqrt((xc * xc).mean(axis=axes, keepdims=True) + attrs["epsilon"])
    xhat = xc * rstd
    g = d64 * scale.astype(np.float64)
    dx = rstd * (g - g.mean(axis=axes, keepdims=True)
                 - xhat * (g * xhat).mean(axis=axes, keepdims=True))
    dscale = unbroadcast(d64 * xhat, scale.shape).reshape(scale.shape)
    dbias = unbroadcast(d64, scale.shape).reshape(scale.shape)
    return (dx.astype(x.dtype), dscale.astype(scale.dtype), dbias.astype(scale.dtype))


@NUMPY_RULES.register("SoftmaxGrad", "LogSoftmaxGrad")
def softmax_grad(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    y, dy = np.asarray(args[0]), np.asarray(args[1])
    axis = attrs["axis"]
    y64, d64 = y.astype(np.float64), dy.astype(np.float64)
    if op_type == "SoftmaxGrad":
        dx = y64 * (d64 - (d64 * y64).sum(axis=axis, keepdims=True))
    else:
        dx = d64 - np.exp(y64) * d64.sum(axis=axis, keepdims=True)
    return (dx.astype(dy.dtype),)


@NUMPY_RULES.register("BatchNormGrad")
def batch_norm_grad(op_type: str, args: tuple, attrs: dict[str, Any], n_out: int) -> tuple:
    """Training-mode statistics over every axis but 1 (biased variance), in float64:
    ``dx = rstd * (g - mean(g) - xhat * mean(g * xhat))`` with ``g = dy * scale``;
    ``dscale = sum(dy * xhat)``, ``dbias = sum(dy)`` per channel."""
    x, scale, dy = (np.asarray(a) for a in args)
    axes = (0,) + tuple(range(2, x.ndim))
    chan = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    x64, d64 = x.astype(np.float64), dy.astype(np.float64)
    xc = x64 - x64.mean(axis=axes, keepdims=True)
    rstd = 1.0 / np.sqrt((xc * xc).mean(axis=axes, keepdims=True) + attrs["epsilon"])
    xhat = xc * rstd
    g = d64 * scale.astype(np.float64).reshape(chan)
    dx = rstd * (g - g.mean(axis=axes, keepdims=True)
                 - xhat * (g * xhat).mean(axis=axes, keepdims=True))
    return (dx.astype(x.dtype), (d64 * xhat).sum(axis=axes).astype(scale.dtype),
            d64.sum(axis=axes).astype(scale.dtype))
