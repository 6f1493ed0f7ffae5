"""The named model configurations of the DistIR paper.

=============  ======================================================  ================
name           configuration                                           weights
=============  ======================================================  ================
``mlp-1b``     MLP, 16 layers of width 8192                            1.07·10⁹
``mlp-17b``    MLP, 64 layers of width 16384                           17.2·10⁹
``mlp-103b``   MLP, 96 layers of width 32768                           103.1·10⁹
``gpt2-1.6b``  GPT-2, 24 layers, d_model 2048, 16 heads                1.31·10⁹
``gpt2-13b``   GPT-2, 40 layers, d_model 5120, 40 heads                12.8·10⁹
``gpt2-175b``  GPT-2, 96 layers, d_model 12288, 96 heads               174.6·10⁹
=============  ======================================================  ================

MLP presets are square (input, hidden and output width equal). GPT-2 presets have a
vocabulary of 50257 and a context of 1024 tokens, and process full-length sequences
(``seq_len`` 1024). The paper's 13B lists d_model 5140, which no head count divides into
GPT-3's 128-wide heads; 5120 with 40 heads of 128 is used instead. (The 1.6B preset's layer
count and width give 1.31·10⁹ weights; the name is the paper's.)

The batch size is a parameter of the search, not of the model: presets carry a default
(``DEFAULT_MLP_BATCH`` = 8192 samples, ``DEFAULT_GPT2_BATCH`` = 64 sequences) that
``get(name, batch_size=...)`` overrides, as it does any other field.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from distir.errors import ConfigError
from distir.ir.core import Function
from distir.models.gpt2 import GPT2Config
from distir.models.mlp import MLPConfig

__all__ = ["PRESETS", "DEFAULT_MLP_BATCH", "DEFAULT_GPT2_BATCH", "get", "build", "names"]

DEFAULT_MLP_BATCH = 8192
"""Samples per step of the MLP presets unless overridden."""

DEFAULT_GPT2_BATCH = 64
"""Sequences per step of the GPT-2 presets unless overridden."""

ModelConfig = MLPConfig | GPT2Config


def _mlp(width: int, layers: int) -> MLPConfig:
    return MLPConfig(batch_size=DEFAULT_MLP_BATCH, input_dim=width, hidden_dim=width,
                     output_dim=width, num_layers=layers)


def _gpt2(n_layer: int, d_model: int, n_head: int) -> GPT2Config:
    return GPT2Config(n_layer=n_layer, d_model=d_model, n_head=n_head, vocab_size=50257,
                      seq_len=1024, batch_size=DEFAULT_GPT2_BATCH, n_positions=1024)


PRESETS: dict[str, ModelConfig] = {
    "mlp-1b": _mlp(8192, 16),
    "mlp-17b": _mlp(16384, 64),
    "mlp-103b": _mlp(32768, 96),
    "gpt2-1.6b": _gpt2(24, 2048, 16),
    "gpt2-13b": _gpt2(40, 5120, 40),
    "gpt2-175b": _gpt2(96, 12288, 96),
}
"""Preset name -> configuration (frozen; derive variants with ``get``)."""


def names(family: str | None = None) -> list[str]:
    """The preset names, optionally only those of ``family`` (``"mlp"`` or ``"gpt2"``)."""
    return [n for n in PRESETS if family is None or n.split("-")[0] == family]


def get(name: str, **overrides: Any) -> ModelConfig:
    """The configuration named ``name``, with ``overrides`` (``batch_size=``, ``dtype=``,
    ...) replacing its fields.

    >>> get("mlp-1b", batch_size=1024).num_params
    1073741824
    >>> get("gpt2-175b").n_head
    96
    """
    cfg = PRESETS.get(name)
    if cfg is None:
        raise ConfigError(f"unknown model preset {name!r}: choose one of "
                          f"{', '.join(PRESETS)}")
    if not overrides:
        return cfg
    fields = {f.name for f in dataclasses.fields(cfg)}
    bad = sorted(set(overrides) - fields)
    if bad:
        raise ConfigError(f"preset {name!r} has no field {', '.join(bad)}: its fields are "
                          f"{', '.join(sorted(fields))}")
    return dataclasses.replace(cfg, **overrides)


def build(name: str, **overrides: Any) -> Function:
    """The DistIR function of preset ``name`` (``get(name, **overrides).build()``)."""
    return get(name, **overrides).build()
