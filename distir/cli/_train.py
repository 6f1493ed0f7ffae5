"""``--train --loss ... --optimizer ... --lr ...``: the options shared by ``distir import`` and
``distir grid-search`` that make a forward model into one training step
(``distir.transforms.training_step``), with one-line errors that name the model."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from distir.errors import ConfigError, DistIRError
from distir.ir.core import Function, Module

__all__ = ["TrainOptions", "add_arguments", "from_args", "train", "train_module"]

_LOSSES = ("mse", "cross_entropy")
_OPTIMIZERS = ("sgd", "adam")


@dataclass(frozen=True, slots=True)
class TrainOptions:
    """How a forward model becomes a training step: ``training_step``'s ``loss``,
    ``optimizer`` and learning rate ``lr`` (defaults: ``training_step``'s own)."""

    loss: str = "mse"
    optimizer: str = "sgd"
    lr: float = 0.01

    def __post_init__(self) -> None:
        if self.loss not in _LOSSES:
            raise ConfigError(f"--loss {self.loss}: choose one of {', '.join(_LOSSES)}")
        if self.optimizer not in _OPTIMIZERS:
            raise ConfigError(f"--optimizer {self.optimizer}: choose one of "
                              f"{', '.join(_OPTIMIZERS)}")
        lr = self.lr
        if isinstance(lr, bool) or not isinstance(lr, int | float) or not lr > 0:
            raise ConfigError(f"--lr {lr}: the learning rate must be a positive number")

    @property
    def label(self) -> str:
        """``train-LOSS-OPTIMIZER``, for model names in result tables (the learning rate
        changes no cost, so it is not part of it)."""
        return f"train-{self.loss}-{self.optimizer}"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add ``--train``, ``--loss``, ``--optimizer`` and ``--lr`` to ``p``."""
    g = p.add_argument_group("training step (the model's forward made into one step)")
    g.add_argument("--train", action="store_true",
                   help="use one training step of the model: its first output against a "
                   "target, the loss's gradient and the optimizer's update")
    g.add_argument("--loss", choices=_LOSSES,
                   help="with --train: mse (a target shaped like the first output) or "
                   "cross_entropy (integer class ids over its last axis); default mse")
    g.add_argument("--optimizer", choices=_OPTIMIZERS,
                   help="with --train: sgd or adam (moments become parameters); default sgd")
    g.add_argument("--lr", type=float, help="with --train: the learning rate (default 0.01)")


def from_args(args: argparse.Namespace) -> TrainOptions | None:
    """The options of ``--train`` (None without it); ``--loss``, ``--optimizer`` or ``--lr``
    without ``--train`` is an error."""
    given = [f"--{k}" for k in ("loss", "optimizer", "lr") if getattr(args, k) is not None]
    if not args.train:
        if given:
            verb = "goes" if len(given) == 1 else "go"
            raise ConfigError(f"{', '.join(given)} {verb} with --train (which makes the model "
                              "a training step)")
        return None
    opts = TrainOptions()
    return TrainOptions(args.loss or opts.loss, args.optimizer or opts.optimizer,
                        opts.lr if args.lr is None else args.lr)


def train(fn: Function, opts: TrainOptions, where: str) -> Function:
    """``training_step(fn)`` with ``opts``, training every floating-point weight (parameter
    bound to an initializer). Errors are one ``ConfigError`` line naming ``where`` (the
    model): no weights to train, a first output the loss cannot take, ..."""
    import numpy as np

    from distir.transforms.training import training_step

    if not any(np.issubdtype(np.asarray(a).dtype, np.floating)
               for a in fn.initializers.values()):
        raise ConfigError(f"{where}: --train needs the model's weights (floating-point "
                          "parameters bound to initializers), and it has none; import the "
                          "ONNX model, or give the .dir file its weights as `distir import "
                          "-o OUT.dir` writes them (OUT.npz beside it)")
    try:
        return training_step(fn, loss=opts.loss, optimizer=opts.optimizer, lr=opts.lr)
    except DistIRError as e:
        msg = e.message.removeprefix("training_step: ")
        raise ConfigError(f"{where}: --train --loss {opts.loss}: {msg}") from None


def train_module(m: Module, opts: TrainOptions, where: str) -> Module:
    """The module whose entry is the training step of ``m``'s entry (``train``); the step's
    initializers are the forward's plus the optimizer state's."""
    return Module([train(m.entry, opts, where)], filename=m.filename)
