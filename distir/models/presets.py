"""The named model configurations of the DistIR paper.

=============  ======================================================  ================
name           configuration                                           weights
=============  ======================================================  ================
``mlp-1b``     MLP, 16 layers of width 8192                            1.07·10⁹
``mlp-17b``    MLP, 64 layers of width 16384                           17.2·10⁹
``mlp-103b``   MLP, 96 layers of width 32768                           103.1·10⁹
``gpt2-350m``  GPT-2 medium, 24 layers, d_model 1024, 16 heads         0.35·10⁹
``gpt2-1.6b``  GPT-2, 24 layers, d_model 2048, 16 heads                1.31·10⁹
``gpt2-13b``   GPT-2, 40 layers, d_model 5120, 40 heads                12.8·10⁹
``gpt2-175b``  GPT-2, 96 layers, d_model 12288, 96 heads               174.6·10⁹
=============  ======================================================  ================

Each GPT-2 preset has a training twin, ``gpt2-350m-train``, ``gpt2-1.6b-train``,
``gpt2-13b-train`` and ``gpt2-175b-train``: one training step of the same model
(``TrainingConfig``), built with ``distir.transforms.training_step`` from the inference
graph, with cross-entropy over the vocabulary (each token's logits against its target id)
and Adam (lr 1e-4) over every weight. ``names()`` lists the seven forward presets,
``names(training=True)`` the four training ones; ``get`` and ``build`` take either.

MLP presets are square (input, hidden and output width equal). GPT-2 presets have a
vocabulary of 50257 and a context of 1024 tokens, and process full-length sequences
(``seq_len`` 1024). The paper's 13B lists d_model 5140, which no head count divides into
GPT-3's 128-wide heads; 5120 with 40 heads of 128 is used instead. (The 1.6B preset's layer
count and width give 1.31·10⁹ weights; the name is the paper's.) ``gpt2-350m`` is not the
paper's: it is GPT-2 medium, the size of the 4-GPU training studies.

The batch size is a parameter of the search, not of the model: presets carry a default
(``DEFAULT_MLP_BATCH`` = 8192 samples, ``DEFAULT_GPT2_BATCH`` = 64 sequences) that
``get(name, batch_size=...)`` overrides, as it does any other field.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from distir.errors import ConfigError
from distir.ir.core import Function
from distir.models.gpt2 import GPT2Config
from distir.models.mlp import MLPConfig

__all__ = ["PRESETS", "TRAINING_PRESETS", "TrainingConfig", "DEFAULT_MLP_BATCH",
           "DEFAULT_GPT2_BATCH", "get", "build", "names"]

DEFAULT_MLP_BATCH = 8192
"""Samples per step of the MLP presets unless overridden."""

DEFAULT_GPT2_BATCH = 64
"""Sequences per step of the GPT-2 presets unless overridden."""



@dataclass(frozen=True, slots=True)
class TrainingConfig:
    """One training step of the forward model ``forward``: ``build()`` is
    ``distir.transforms.training_step(forward.build(), loss=..., optimizer=..., lr=...,
    checkpoint=..., wrt=every weight)`` (the builder's weights are parameters without
    initializers, so they are named: ``forward.weight_shapes()``, in order). Fields of
    ``forward`` (``batch_size``, ``dtype``, ...) read through; ``get`` overrides them.

    Results of the step: the loss, the updated weights in ``weight_shapes()`` order, then
    for Adam the moments ``m``, ``v`` of each weight and the step count (see
    ``training_step``). Its parameters: ``input_ids``, the weights, ``target`` (Int64
    ``(batch, seq)``, the next token ids), then the optimizer state. Bad options are
    reported by ``build`` (``training_step``'s one-line ``ConfigError``).
    """

    forward: GPT2Config
    loss: str = "cross_entropy"
    optimizer: str = "adam"
    lr: float = 1e-4
    checkpoint: str = "none"

    @property
    def batch_size(self) -> int:
        return self.forward.batch_size

    @property
    def num_params(self) -> int:
        """Weight elements of the model (the optimizer state is not counted)."""
        return self.forward.num_params

    def weight_shapes(self) -> dict[str, tuple[int, ...]]:
        """The trained weights' shapes, by name, in the step's parameter order."""
        return self.forward.weight_shapes()

    def build(self) -> Function:
        """The training step as a DistIR function (verified by ``training_step``)."""
        # distir.models builds programs; making one a training step is a transform, imported
        # here only (building a forward preset does not load the transforms).
        from distir.transforms.training import training_step

        return training_step(self.forward.build(), loss=self.loss, optimizer=self.optimizer,
                             lr=self.lr, checkpoint=self.checkpoint,
                             wrt=list(self.forward.weight_shapes()))


ModelConfig = MLPConfig | GPT2Config | TrainingConfig


def _mlp(width: int, layers: int) -> MLPConfig:
    return MLPConfig(batch_size=DEFAULT_MLP_BATCH, input_dim=width, hidden_dim=width,
                     output_dim=width, num_layers=layers)


def _gpt2(n_layer: int, d_model: int, n_head: int) -> GPT2Config:
    return GPT2Config(n_layer=n_layer, d_model=d_model, n_head=n_head, vocab_size=50257,
                      seq_len=1024, batch_size=DEFAULT_GPT2_BATCH, n_positions=1024)


PRESETS: dict[str, MLPConfig | GPT2Config] = {
    "mlp-1b": _mlp(8192, 16),
    "mlp-17b": _mlp(16384, 64),
    "mlp-103b": _mlp(32768, 96),
    "gpt2-350m": _gpt2(24, 1024, 16),
    "gpt2-1.6b": _gpt2(24, 2048, 16),
    "gpt2-13b": _gpt2(40, 5120, 40),
    "gpt2-175b": _gpt2(96, 12288, 96),
}
"""Preset name -> configuration of a forward model or the MLP step (frozen; derive
variants with ``get``)."""

TRAINING_PRESETS: dict[str, TrainingConfig] = {
    f"{name}-train": TrainingConfig(cfg) for name, cfg in PRESETS.items()
    if isinstance(cfg, GPT2Config)
}
"""``gpt2-*-train``: one training step of each GPT-2 preset (cross-entropy, Adam, lr 1e-4)."""


def names(family: str | None = None, *, training: bool = False) -> list[str]:
    """The preset names, optionally only those of ``family`` (``"mlp"`` or ``"gpt2"``):
    the forward presets (and the MLP step), or with ``training`` the training steps of
    the GPT-2 presets (``gpt2-1.6b-train``, ...)."""
    table: dict[str, Any] = TRAINING_PRESETS if training else PRESETS
    return [n for n in table if family is None or n.split("-")[0] == family]


def get(name: str, **overrides: Any) -> ModelConfig:
    """The configuration named ``name``, with ``overrides`` (``batch_size=``, ``dtype=``,
    ...) replacing its fields.

    >>> get("mlp-1b", batch_size=1024).num_params
    1073741824
    >>> get("gpt2-175b").n_head
    96
    >>> get("gpt2-13b-train", batch_size=8, lr=1e-3).forward.batch_size
    8
    """
    cfg: ModelConfig | None = PRESETS.get(name) or TRAINING_PRESETS.get(name)
    if cfg is None:
        raise ConfigError(f"unknown model preset {name!r}: choose one of "
                          f"{', '.join([*PRESETS, *TRAINING_PRESETS])}")
    if not overrides:
        return cfg
    if isinstance(cfg, TrainingConfig):
        own = {f.name for f in dataclasses.fields(cfg)} - {"forward"}
        mine = {k: v for k, v in overrides.items() if k in own}
        rest = {k: v for k, v in overrides.items() if k not in own}
        fwd = _replace(name, cfg.forward, rest, extra=own) if rest else cfg.forward
        return dataclasses.replace(cfg, forward=fwd, **mine)
    return _replace(name, cfg, overrides)


def _replace(name: str, cfg: Any, overrides: dict[str, Any],
             extra: set[str] | frozenset[str] = frozenset()) -> Any:
    fields = {f.name for f in dataclasses.fields(cfg)} | set(extra)
    bad = sorted(set(overrides) - fields)
    if bad:
        raise ConfigError(f"preset {name!r} has no field {', '.join(bad)}: its fields are "
                          f"{', '.join(sorted(fields))}")
    return dataclasses.replace(cfg, **overrides)


def build(name: str, **overrides: Any) -> Function:
    """The DistIR function of preset ``name`` (``get(name, **overrides).build()``)."""
    return get(name, **overrides).build()
