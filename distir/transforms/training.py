"""``training_step``: a forward program made into one training step.

Given a forward function whose first result is the prediction, the step

1. appends a *target* parameter: for ``loss="mse"`` a tensor of the prediction's type; for
   ``loss="cross_entropy"`` Int64 class indices of the prediction's shape without its last
   (class) axis;
2. appends the loss (``MSELoss``: ``0.5 * sum((p - y)^2)``, or ``SoftmaxCrossEntropyLoss``
   over the last axis; both sum over the batch unless ``reduction="mean"``), so that the
   gradients of microbatches and replicas add up;
3. differentiates it with ``grad`` with respect to ``wrt`` (default: every floating-point
   parameter bound to an initializer);
4. updates each parameter: ``SGDOptimizer`` (``w - lr * dw``) or ``AdamOptimizer``
   (``torch.optim.Adam``). Adam's state is parameters of the step: per differentiated
   parameter ``<name>.adam_m`` and ``<name>.adam_v`` (bound to zeros when the parameter is
   bound to an initializer), then ``adam_step`` (the number of this step, 1 first; bound
   to 1 likewise).

Results: the loss, the updated parameters in ``wrt`` order, then for Adam the new state:
``m`` and ``v`` per parameter in ``wrt`` order, then ``adam_step + 1``.

``checkpoint="layers"`` recomputes each repeated layer's forward ops right before its
backward (activation checkpointing): less memory between the passes, one more forward
pass of the layers in time. Both show in ``distir.simulate``.

``batchnorm`` says which statistics ``BatchNormalization`` normalizes with: ``"keep"``
(default) keeps each op's mode as exported (an eval-mode export normalizes with its fixed
running statistics, which then get gradients like any input); ``"train"`` switches every
inference-mode ``BatchNormalization`` to training mode (``training_mode=1``: the batch's
statistics, as ``torch.nn.BatchNorm2d.train()`` does, differentiated by ``BatchNormGrad``).
Its running-statistics results (ONNX's ``momentum`` update) exist but are not results of
the step: the step's results are the same for both modes. Under data parallelism
(``dtp``'s D) each replica's statistics are those of its own part of the batch (as
PyTorch's ``BatchNorm2d`` under DDP, not ``SyncBatchNorm``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from distir.analysis.api import type_env
from distir.analysis.values import type_of
from distir.errors import ConfigError, TransformError
from distir.ir.builder import FunctionBuilder
from distir.ir.core import Function, Op, Value
from distir.ir.inline import inline_calls
from distir.ir.types import DType, ScalarType, TensorType
from distir.ir.verify import verify
from distir.transforms.checkpoint import layer_groups
from distir.transforms.grad import default_wrt, differentiate, drop_dead_ops

__all__ = ["training_step", "LOSSES", "OPTIMIZERS"]

LOSSES = ("mse", "cross_entropy")
OPTIMIZERS = ("sgd", "adam")
_CHECKPOINTS = ("none", "layers")
BATCHNORM_MODES = ("keep", "train")


def _check_options(loss: str, optimizer: str, lr: float, checkpoint: str, reduction: str,
                   ) -> None:
    if loss not in LOSSES:
        raise ConfigError(f"training_step: loss must be one of {', '.join(LOSSES)}, "
                          f"got {loss!r}")
    if optimizer not in OPTIMIZERS:
        raise ConfigError(f"training_step: optimizer must be one of {', '.join(OPTIMIZERS)}, "
                          f"got {optimizer!r}")
    if isinstance(lr, bool) or not isinstance(lr, int | float) or not lr > 0:
        raise ConfigError(f"training_step: lr must be a positive number, got {lr!r}")
    if reduction not in ("sum", "mean"):
        raise ConfigError(f"training_step: reduction must be \"sum\" or \"mean\", got "
                          f"{reduction!r}")
    if checkpoint not in _CHECKPOINTS:
        raise ConfigError(f"training_step: checkpoint must be \"none\" or \"layers\", got "
                          f"{checkpoint!r}")


def _as_tensor(t: Any) -> TensorType | None:
    t = type_of(t) if t is not None else None
    if isinstance(t, ScalarType):
        return TensorType(t.dtype, (), t.device)
    return t if isinstance(t, TensorType) else None


def _with_loss(fn: Function, loss: str, reduction: str, batchnorm: str = "keep",
               ) -> Function:
    """``fn`` with a target parameter appended and the loss as its only result; with
    ``batchnorm="train"`` every inference-mode ``BatchNormalization`` in training mode
    (three results, the running statistics unread)."""
    if not fn.returns:
        raise TransformError(f"training_step: @{fn.name} returns nothing; its first result "
                             "must be the prediction")
    env = type_env(fn)
    pt = _as_tensor(env.get(fn.returns[0]))
    if pt is None or not pt.dtype.is_float:
        raise TransformError(f"training_step: the first result of @{fn.name} must be a "
                             f"floating-point tensor (the prediction), got {pt}")
    b = FunctionBuilder(fn.name)
    new: dict[Value, Value] = {p: b.param(p.name, p.type) for p in fn.params}
    if loss == "mse":
        target_t = pt
    else:
        if pt.rank < 1:
            raise TransformError("training_step: cross_entropy needs a prediction with a "
                                 f"class axis (the last), got shape {pt.shape}")
        target_t = TensorType(DType.Int64, pt.shape[:-1], pt.device)
    target = b.param("target", target_t)
    for op in fn.ops:
        outs = [Value(o.name, o.type) for o in op.outputs]
        new.update(zip(op.outputs, outs))
        attrs: dict[str, Any] = dict(op.attrs)
        if (batchnorm == "train" and op.op_type == "BatchNormalization"
                and not int(attrs.get("training_mode", 0))):
            attrs["training_mode"] = 1
            outs += [Value() for _ in range(3 - len(outs))]
        b.ops.append(Op(op.op_type, [None if v is None else new[v] for v in op.inputs],
                        attrs or None, outs, callee=op.callee))
    op_type = "MSELoss" if loss == "mse" else "SoftmaxCrossEntropyLoss"
    value = b.op(op_type, new[fn.returns[0]], target, reduction=reduction, name="loss")
    out = drop_dead_ops(b.ret(value))
    out.initializers = dict(fn.initializers)
    return out


def training_step(fn: Function, *, loss: str = "mse", optimizer: str = "sgd",
                  lr: float = 0.01, wrt: Sequence[str] | None = None,
                  checkpoint: str = "none", reduction: str = "sum", beta1: float = 0.9,
                  beta2: float = 0.999, eps: float = 1e-8, batchnorm: str = "keep",
                  ) -> Function:
    """One training step of ``fn`` (see the module docstring for its parameters and
    results). ``checkpoint="layers"`` recomputes each repeated layer's activations in the
    backward pass instead of keeping them (``distir.transforms.checkpoint``);
    ``batchnorm="train"`` normalizes with batch statistics (module docstring)."""
    _check_options(loss, optimizer, lr, checkpoint, reduction)
    if batchnorm not in BATCHNORM_MODES:
        raise ConfigError(f"training_step: batchnorm must be \"keep\" or \"train\", got "
                          f"{batchnorm!r}")
    if any(op.callee is not None for op in fn.ops):
        fn = inline_calls(fn)
    names = list(wrt) if wrt is not None else default_wrt(fn)
    if not names:
        raise TransformError(f"training_step: @{fn.name} has no floating-point parameter "
                             "bound to an initializer to train by default; pass wrt=[names]")
    with_loss = _with_loss(fn, loss, reduction, batchnorm)
    groups = layer_groups(with_loss) if checkpoint == "layers" else []
    g = differentiate(with_loss, names, groups)
    b = FunctionBuilder(g.name)
    new: dict[Value, Value] = {p: b.param(p.name, p.type) for p in g.params}
    by_name = {p.name: p for p in g.params}
    env = type_env(g)
    inits = dict(g.initializers)
    state: list[tuple[Value, Value]] = []
    step: Value | None = None
    if optimizer == "adam":
        for name in names:
            t = _as_tensor(env.get(by_name[name]))
            assert t is not None  # grad checked it is a float tensor
            m = b.param(f"{name}.adam_m", t)
            v = b.param(f"{name}.adam_v", t)
            state.append((m, v))
            if name in g.initializers:
                inits[f"{name}.adam_m"] = np.zeros(t.shape, t.dtype.np)
                inits[f"{name}.adam_v"] = np.zeros(t.shape, t.dtype.np)
        dev = _as_tensor(env.get(by_name[names[0]]))
        step_t = TensorType(DType.Float32, (), dev.device if dev is not None else 0)
        step = b.param("adam_step", step_t)
        if all(n in g.initializers for n in names):
            inits["adam_step"] = np.ones((), np.float32)
    for op in g.ops:
        outs = [Value(o.name, o.type) for o in op.outputs]
        new.update(zip(op.outputs, outs))
        b.ops.append(Op(op.op_type, [None if v is None else new[v] for v in op.inputs],
                        dict(op.attrs) or None, outs))
    loss_v, grads = new[g.returns[0]], [new[v] for v in g.returns[1:]]
    updated: list[Value] = []
    new_state: list[Value] = []
    for i, (name, dw) in enumerate(zip(names, grads)):
        w = new[by_name[name]]
        if optimizer == "sgd":
            updated.append(b.op("SGDOptimizer", w, dw, lr=float(lr), name=f"{name}.new"))
        else:
            m, v = state[i]
            w2, m2, v2 = b.op("AdamOptimizer", w, dw, m, v, step, lr=float(lr),
                              beta1=float(beta1), beta2=float(beta2), eps=float(eps),
                              name=(f"{name}.new", f"{name}.adam_m.new",
                                    f"{name}.adam_v.new"))
            updated.append(w2)
            new_state += [m2, v2]
    if step is not None:
        dev = _as_tensor(env.get(by_name[names[0]]))
        one = b.op("Constant", value=np.ones((), np.float32),
                   device=dev.device if dev is not None else 0)
        new_state.append(b.op("Add", step, one, name="adam_step.new"))
    out = b.ret(loss_v, *updated, *new_state)
    out.initializers = inits
    verify(out)
    return out
