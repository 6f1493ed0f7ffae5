"""Lowerings of the training ops: gradients, losses and optimizers.

They compute what ``distir.analysis.numpy_rules.train`` defines (see its docstring): losses
reduce by sum unless ``reduction="mean"``, ``MSELoss`` carries the factor 0.5, the
optimizers follow ``torch.optim``'s single-tensor update order. A gradient result that the
program never uses is not computed (``_, %dw = MatMulGrad(...)`` costs one product).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from distir.backend.lowering import LOWERINGS, Kernel, Static, torch_dtype
from distir.errors import ExecutionError, UnsupportedError


def _unbroadcast(g: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """``g`` summed over the dimensions along which a tensor of ``shape`` was broadcast."""
    if g.shape == shape:
        return g
    lead = g.dim() - len(shape)
    dims = list(range(lead)) + [lead + i for i, d in enumerate(shape)
                                if d == 1 and g.shape[lead + i] != 1]
    return g.sum(dim=dims).reshape(shape) if dims else g.reshape(shape)


@LOWERINGS.register("MatMulGrad")
def _matmul_grad(s: Static) -> Kernel:
    a_t, b_t = s.inp(0), s.inp(1)
    need_a, need_b = s.live_outputs
    if a_t.rank == 1 or b_t.rank == 1:
        a_shape, b_shape = a_t.shape, b_t.shape

        def k1(a: torch.Tensor, b: torch.Tensor, dy: torch.Tensor) -> tuple:
            a2 = a.unsqueeze(0) if a.dim() == 1 else a
            b2 = b.unsqueeze(1) if b.dim() == 1 else b
            dy2 = dy.unsqueeze(-1) if b.dim() == 1 else dy
            dy2 = dy2.unsqueeze(-2) if a.dim() == 1 else dy2
            da = _unbroadcast(dy2 @ b2.mT, a2.shape).reshape(a_shape) if need_a else None
            db = _unbroadcast(a2.mT @ dy2, b2.shape).reshape(b_shape) if need_b else None
            return (da, db)

        return k1
    if b_t.rank == 2:
        # The common case (a weight): fold a's batch dimensions into one product.
        k_dim, n_dim = b_t.shape

        def k2(a: torch.Tensor, b: torch.Tensor, dy: torch.Tensor) -> tuple:
            da = torch.matmul(dy, b.t()) if need_a else None
            db = (torch.mm(a.reshape(-1, k_dim).t(), dy.reshape(-1, n_dim))
                  if need_b else None)
            return (da, db)

        return k2
    a_shape, b_shape = a_t.shape, b_t.shape

    def k(a: torch.Tensor, b: torch.Tensor, dy: torch.Tensor) -> tuple:
        da = _unbroadcast(torch.matmul(dy, b.mT), a_shape) if need_a else None
        db = _unbroadcast(torch.matmul(a.mT, dy), b_shape) if need_b else None
        return (da, db)

    return k


@LOWERINGS.register("GemmGrad")
def _gemm_grad(s: Static) -> Kernel:
    alpha, beta = float(s.attrs["alpha"]), float(s.attrs["beta"])
    ta, tb = int(s.attrs["transA"]), int(s.attrs["transB"])
    n_out = len(s.out_types)
    c_shape = s.inp(2).shape if n_out == 3 else None

    def k(*args: torch.Tensor) -> tuple:
        a, b, dy = args[0], args[1], args[-1]
        a_op = a.t() if ta else a
        b_op = b.t() if tb else b
        da = dy @ b_op.t()
        db = a_op.t() @ dy
        if alpha != 1.0:
            da, db = da * alpha, db * alpha
        outs = [da.t() if ta else da, db.t() if tb else db]
        if c_shape is not None:
            dc = _unbroadcast(dy, c_shape)
            outs.append(dc * beta if beta != 1.0 else dc.clone())
        return tuple(outs)

    return k


@LOWERINGS.register("ReluGrad")
def _relu_grad(s: Static) -> Kernel:
    tb = torch.ops.aten.threshold_backward
    return lambda x, dy: (tb(dy, x, 0),)


@LOWERINGS.register("GeluGrad")
def _gelu_grad(s: Static) -> Kernel:
    approx = s.attrs.get("approximate", "none")
    if approx not in ("none", "tanh"):
        raise UnsupportedError(f"approximate={approx!r} (expected \"none\" or \"tanh\")")
    gb = torch.ops.aten.gelu_backward
    return lambda x, dy: (gb(dy, x, approximate=approx),)


def _scale(s: Static, count: int) -> float:
    r = s.attrs.get("reduction", "sum")
    if r == "sum":
        return 1.0
    if r == "mean":
        return 1.0 / max(count, 1)
    raise UnsupportedError(f"reduction={r!r} (expected \"sum\" or \"mean\")")


def _compute(x: torch.Tensor) -> torch.Tensor:
    """Half precision computed in float32, as the reference does."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


@LOWERINGS.register("MSELoss")
def _mse_loss(s: Static) -> Kernel:
    scale = 0.5 * _scale(s, s.inp(0).numel)
    dt = torch_dtype(s.out().dtype)
    return lambda p, y: ((torch.sum(torch.square(_compute(p) - _compute(y))) * scale).to(dt),)


@LOWERINGS.register("MSELossGrad")
def _mse_loss_grad(s: Static) -> Kernel:
    scale = _scale(s, s.inp(0).numel)
    if scale == 1.0:
        return lambda p, y: (p - y,)
    return lambda p, y: ((p - y) * scale,)


@LOWERINGS.register("SoftmaxCrossEntropyLoss", "SoftmaxCrossEntropyLossGrad")
def _xent(s: Static) -> Kernel:
    """Cross entropy over the last axis. Half-precision logits are read as they are: the
    softmax kernels accumulate in float32 and write the input's dtype, so neither the loss
    nor its gradient makes a float32 copy of the logits (over a vocabulary of 50,257 words
    and 8,192 positions, 1.6 GB each; they made the loss 4x the cost of a memory-bound pass
    and were memory the simulator does not see). The loss sums per-row losses in float32, so
    a sum over many rows does not overflow the half type before the scale is applied."""
    logits_t = s.inp(0)
    classes = logits_t.shape[-1]
    count = s.inp(1).numel
    scale = _scale(s, count)
    dt = torch_dtype(logits_t.dtype)
    if s.op_type == "SoftmaxCrossEntropyLoss":
        def loss(x: torch.Tensor, lab: torch.Tensor) -> tuple:
            rows = F.cross_entropy(x.reshape(-1, classes), lab.reshape(-1).long(),
                                   reduction="none")
            return ((rows.float().sum() * scale).to(dt),)

        return loss
    shape = logits_t.shape

    def grad(x: torch.Tensor, lab: torch.Tensor) -> tuple:
        g = torch.softmax(x, dim=-1)  # a new tensor: updated in place below
        g.scatter_add_(-1, lab.long().unsqueeze(-1),
                       torch.full((*lab.shape, 1), -1.0, dtype=g.dtype, device=g.device))
        if scale != 1.0:
            g.mul_(scale)
        return (g.reshape(shape),)

    return grad


@LOWERINGS.register("SGDOptimizer")
def _sgd(s: Static) -> Kernel:
    lr = float(s.attrs["lr"])
    return lambda w, dw: (torch.add(w, dw, alpha=-lr),)


@LOWERINGS.register("AdamOptimizer")
def _adam(s: Static) -> Kernel:
    lr, b1, b2 = float(s.attrs["lr"]), float(s.attrs["beta1"]), float(s.attrs["beta2"])
    eps, wd = float(s.attrs["eps"]), float(s.attrs["weight_decay"])
    step_c = s.const(4)

    def moments(w: torch.Tensor, dw: torch.Tensor, m: torch.Tensor, v: torch.Tensor,
                ) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.add(dw, w, alpha=wd) if wd != 0 else dw
        m_new = torch.lerp(m, g, 1.0 - b1)
        v_new = torch.addcmul(v * b2, g, g, value=1.0 - b2)
        return m_new, v_new

    if step_c is not None and not float(step_c.reshape(-1)[0]) >= 1:
        raise ExecutionError(f"AdamOptimizer: step counts from 1 (the first step), got "
                             f"{float(step_c.reshape(-1)[0]):g}")
    fused = _fused_adam(s, lr, b1, b2, eps, wd)
    if fused is not None:
        return fused
    if step_c is not None:
        step = float(step_c.reshape(-1)[0])
        step_size = lr / (1.0 - b1 ** step)
        bc2_sqrt = math.sqrt(1.0 - b2 ** step)

        def k(w: torch.Tensor, dw: torch.Tensor, m: torch.Tensor, v: torch.Tensor,
              _step: torch.Tensor) -> tuple:
            m_new, v_new = moments(w, dw, m, v)
            denom = (v_new.sqrt() / bc2_sqrt).add_(eps)
            return (torch.addcdiv(w, m_new, denom, value=-step_size), m_new, v_new)

        return k

    def k_dyn(w: torch.Tensor, dw: torch.Tensor, m: torch.Tensor, v: torch.Tensor,
              step: torch.Tensor) -> tuple:
        m_new, v_new = moments(w, dw, m, v)
        st = step.reshape(()).to(torch.float64)
        step_size = (lr / (1.0 - torch.pow(b1, st))).to(w.dtype)
        bc2_sqrt = torch.sqrt(1.0 - torch.pow(b2, st)).to(w.dtype)
        denom = (v_new.sqrt() / bc2_sqrt).add_(eps)
        return (w - step_size * (m_new / denom), m_new, v_new)

    return k_dyn


_FUSED_DTYPES = ("Float32", "Float16", "BFloat16")


def _fused_adam(s: Static, lr: float, b1: float, b2: float, eps: float, wd: float,
                ) -> Kernel | None:
    """``torch._fused_adam_`` (one kernel: PyTorch's ``Adam(fused=True)``) on copies of
    ``w``, ``m`` and ``v`` (in place where the program donates them), when the four tensors
    share a floating dtype of ``_FUSED_DTYPES`` and the step count is a Float32 scalar
    (``None`` otherwise: the composite below). The step count is read on the device, as
    the composite's runtime step is, so that the same kernel serves every step."""
    ts = [s.in_types[i] for i in range(5)]
    if any(t is None for t in ts):
        return None
    w_t, step_t = s.inp(0), s.inp(4)
    if (w_t.dtype.value not in _FUSED_DTYPES or step_t.dtype.value != "Float32"
            or step_t.numel != 1 or any(s.inp(i).dtype != w_t.dtype for i in range(1, 4))):
        return None
    own = [bool(s.donate[i]) if i < len(s.donate) else False for i in (0, 2, 3)]
    fused = torch._fused_adam_

    def mine(t: torch.Tensor, owned: bool) -> torch.Tensor:
        """A contiguous tensor the kernel may overwrite."""
        if owned and t.is_contiguous():
            return t
        return t.clone(memory_format=torch.contiguous_format)

    def k(w: torch.Tensor, dw: torch.Tensor, m: torch.Tensor, v: torch.Tensor,
          step: torch.Tensor) -> tuple:
        # The CUDA kernel wants the four tensors with equal strides: all contiguous.
        w2, m2, v2 = mine(w, own[0]), mine(m, own[1]), mine(v, own[2])
        fused([w2], [dw.contiguous()], [m2], [v2], [], [step.reshape(())], lr=lr, beta1=b1,
              beta2=b2, weight_decay=wd, eps=eps, amsgrad=False, maximize=False)
        return (w2, m2, v2)

    return k


@LOWERINGS.register("ConvGrad")
def _conv_grad(s: Static) -> Kernel:
    """``aten.convolution_backward``; asymmetric pads are applied to ``x`` first and cropped
    from ``dx``. A result the program never uses is not computed."""
    x_t = s.inp(0)
    n = x_t.rank - 2
    strides, dil = [int(v) for v in s.attrs["strides"]], [int(v) for v in s.attrs["dilations"]]
    pads = [int(v) for v in s.attrs["pads"]]
    pb, pe = pads[:n], pads[n:]
    group = int(s.attrs["group"])
    need_x, need_w = s.live_outputs
    cb = torch.ops.aten.convolution_backward
    mask = [need_x, need_w, False]
    if pb == pe:
        return lambda x, w, dy: cb(dy, x, w, None, strides, pb, dil, False, [0] * n, group,
                                   mask)[:2]
    padarg: list[int] = []
    for b, e in zip(reversed(pb), reversed(pe)):
        padarg += [b, e]
    crop = (slice(None), slice(None)) + tuple(slice(b, b + size)
                                              for b, size in zip(pb, x_t.shape[2:]))

    def k(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor) -> tuple:
        gx, gw, _ = cb(dy, F.pad(x, padarg), w, None, strides, [0] * n, dil, False, [0] * n,
                       group, mask)
        return (gx[crop] if gx is not None else None, gw)

    return k


@LOWERINGS.register("MaxPoolGrad", "AveragePoolGrad")
def _pool_grad(s: Static) -> Kernel:
    """``MaxPoolGrad``: the pool with indices, then its backward (ATen kernels, 1-D as 2-D).
    ``AveragePoolGrad``: ATen's ``avg_pool{2,3}d_backward`` where the forward lowering is
    one ATen call (symmetric pads that count, or none, or any without ``ceil_mode``);
    otherwise (asymmetric pads, or pads left out of the count with ``ceil_mode``) the
    gradient of the forward pool's own lowering, by ``torch.autograd`` (on a copy of
    ``x``): the same padding, window and count conventions by construction, at the cost
    of five tensors of the input's size held while it runs (PoolFormer's pooling mixers,
    256 MiB at 64 images on an H200). ``ceil_mode``
    is read off the shapes (``dy`` has more outputs than floor division gives)."""
    x_t, dy_t = s.inp(0), s.inp(1)
    n = x_t.rank - 2
    kernel = [int(v) for v in s.attrs["kernel_shape"]]
    strides = [int(v) for v in s.attrs["strides"]]
    pads = [int(v) for v in s.attrs["pads"]]
    dil = [int(v) for v in s.attrs.get("dilations", [1] * n)]
    ceil = 0
    for i in range(n):
        span = x_t.shape[2 + i] + pads[i] + pads[n + i] - (kernel[i] - 1) * dil[i] - 1
        if span // strides[i] + 1 != dy_t.shape[2 + i]:
            ceil = 1
    if s.op_type == "MaxPoolGrad" and n in (1, 2, 3):
        return _max_pool_grad(n, kernel, strides, pads, dil, bool(ceil), x_t.shape)
    include = int(s.attrs.get("count_include_pad", 0))
    if (s.op_type == "AveragePoolGrad" and n in (1, 2, 3) and pads[:n] == pads[n:]
            and all(2 * p <= k for p, k in zip(pads, kernel))
            and (include or not any(pads) or not ceil)):
        return _avg_pool_grad(n, kernel, strides, pads[:n], bool(ceil), bool(include))
    fwd = "MaxPool" if s.op_type == "MaxPoolGrad" else "AveragePool"
    attrs = {"kernel_shape": kernel, "strides": strides, "pads": pads, "ceil_mode": ceil,
             "auto_pad": "NOTSET"}
    if fwd == "MaxPool":
        attrs["dilations"] = dil
    else:
        attrs["count_include_pad"] = int(s.attrs["count_include_pad"])
    static = Static(fwd, attrs, (x_t,), (dy_t,), (None,), (True,), (False,), s.device,
                     s.rank, s.groups)
    entry = LOWERINGS.get(fwd)
    if entry is None:
        raise UnsupportedError(f"{s.op_type} needs the lowering of {fwd}")
    pool = entry.compile(static)

    def k(x: torch.Tensor, dy: torch.Tensor) -> tuple:
        # Programs run under inference mode, whose tensors autograd cannot record: the
        # input is copied out of it.
        with torch.inference_mode(False), torch.enable_grad():
            xr = x.clone().requires_grad_(True)
            (y,) = pool(xr)
            (gx,) = torch.autograd.grad(y, xr, dy.clone())
        return (gx,)

    return k


def _avg_pool_grad(n: int, kernel: list[int], strides: list[int], pads: list[int],
                   ceil: bool, include: bool) -> Kernel:
    """ATen's ``avg_pool{2,3}d_backward`` (1-D as 2-D): reads ``dy`` only, writes ``dx``;
    symmetric pads (counted, or left out of the count without ``ceil_mode``) or none, as
    the forward lowering's one-call case."""
    aten = torch.ops.aten
    bwd = aten.avg_pool3d_backward if n == 3 else aten.avg_pool2d_backward
    one = n == 1
    kk, ss, pp = ([1] + kernel, [1] + strides, [0] + pads) if one else (kernel, strides, pads)

    def k(x: torch.Tensor, dy: torch.Tensor) -> tuple:
        if one:
            return (bwd(dy.unsqueeze(2), x.unsqueeze(2), kk, ss, pp, ceil, include,
                        None).squeeze(2),)
        return (bwd(dy, x, kk, ss, pp, ceil, include, None),)

    return k


def _max_pool_grad(n: int, kernel: list[int], strides: list[int], pads: list[int],
                   dil: list[int], ceil: bool, x_shape: tuple[int, ...]) -> Kernel:
    """ATen's ``max_pool{2,3}d_with_indices`` and its backward; asymmetric pads are applied
    with ``-inf`` first and cropped from the gradient."""
    aten = torch.ops.aten
    fwd, bwd = ((aten.max_pool3d_with_indices, aten.max_pool3d_with_indices_backward)
                if n == 3 else (aten.max_pool2d_with_indices,
                                aten.max_pool2d_with_indices_backward))
    pb, pe = pads[:n], pads[n:]
    sym = pb == pe and all(2 * p <= k for p, k in zip(pb, kernel))
    padarg: list[int] = []
    for b, e in zip(reversed(pb), reversed(pe)):
        padarg += [b, e]
    crop = (slice(None), slice(None)) + tuple(slice(b, b + size)
                                              for b, size in zip(pb, x_shape[2:]))
    one = n == 1  # as 2-D, with a unit first spatial axis
    kk, ss, dd = ([1] + kernel, [1] + strides, [1] + dil) if one else (kernel, strides, dil)
    inner = ([0] + pb if one else pb) if sym else [0] * len(kk)

    def k(x: torch.Tensor, dy: torch.Tensor) -> tuple:
        xp = x if sym else F.pad(x, padarg, value=float("-inf"))
        if one:
            xp, dy = xp.unsqueeze(2), dy.unsqueeze(2)
        _, idx = fwd(xp, kk, ss, inner, dd, ceil)
        g = bwd(dy, xp, kk, ss, inner, dd, ceil, idx)
        if one:
            g = g.squeeze(2)
        return (g if sym else g[crop],)

    return k


@LOWERINGS.register("LayerNormGrad")
def _layer_norm_grad(s: Static) -> Kernel:
    """``aten.native_layer_norm`` (for the statistics) then its backward; a scale that
    broadcasts to the normalized shape is expanded, and its gradient summed back."""
    x_t, w_t = s.inp(0), s.inp(1)
    axis = int(s.attrs["axis"]) % x_t.rank
    norm = list(x_t.shape[axis:])
    eps = float(s.attrs["epsilon"])
    w_shape = w_t.shape
    mask = list(s.live_outputs)
    fwd, bwd = torch.ops.aten.native_layer_norm, torch.ops.aten.native_layer_norm_backward

    def k(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor) -> tuple:
        wf = w if tuple(w.shape) == tuple(norm) else w.expand(norm)
        _, mean, rstd = fwd(x, norm, wf, None, eps)
        # The bias argument only tells the kernel whether to compute dbias.
        dx, dw, db = bwd(dy, x, norm, mean, rstd, wf, wf if mask[2] else None, mask)
        if dw is not None and tuple(dw.shape) != w_shape:
            dw = _unbroadcast(dw, w_shape)
        if db is not None and tuple(db.shape) != w_shape:
            db = _unbroadcast(db, w_shape)
        return (dx, dw, db)

    return k


@LOWERINGS.register("SoftmaxGrad", "LogSoftmaxGrad")
def _softmax_grad(s: Static) -> Kernel:
    axis = int(s.attrs["axis"]) % max(s.inp(0).rank, 1)
    dt = torch_dtype(s.inp(0).dtype)
    f = (torch.ops.aten._softmax_backward_data if s.op_type == "SoftmaxGrad"
         else torch.ops.aten._log_softmax_backward_data)
    return lambda y, dy: (f(dy, y, axis, dt),)


@LOWERINGS.register("BatchNormGrad")
def _batch_norm_grad(s: Static) -> Kernel:
    """The batch statistics (one reduction over ``x``: ``torch.batch_norm_stats`` on a GPU,
    ``torch.var_mean`` elsewhere; no normalized tensor is written) then
    ``aten.native_batch_norm_backward``."""
    eps = float(s.attrs["epsilon"])
    mask = list(s.live_outputs)
    dims = [0] + list(range(2, s.inp(0).rank))
    bwd = torch.ops.aten.native_batch_norm_backward

    def k(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor) -> tuple:
        if x.is_cuda:
            mean, invstd = torch.batch_norm_stats(x, eps)
        else:
            var, mean = torch.var_mean(x, dims, correction=0)
            invstd = torch.rsqrt(var + eps)
        return tuple(bwd(dy, x, w, None, None, mean, invstd, True, eps, mask))

    return k
