"""The paper's presets: names, sizes, overrides, and that each one type-propagates."""

from __future__ import annotations

import pytest

import distir
from distir.errors import ConfigError
from distir.ir import DType, TensorType
from distir.models import GPT2Config, MLPConfig, presets


def test_names_and_sizes() -> None:
    assert presets.names() == ["mlp-1b", "mlp-17b", "mlp-103b", "gpt2-350m", "gpt2-1.6b",
                               "gpt2-13b", "gpt2-175b"]
    assert presets.names("mlp") == ["mlp-1b", "mlp-17b", "mlp-103b"]
    sizes = {n: (c.num_layers, c.hidden_dim) for n, c in presets.PRESETS.items()
             if isinstance(c, MLPConfig)}
    assert sizes == {"mlp-1b": (16, 8192), "mlp-17b": (64, 16384), "mlp-103b": (96, 32768)}
    gpt = {n: (c.n_layer, c.d_model, c.n_head, c.vocab_size, c.n_ctx)
           for n, c in presets.PRESETS.items() if isinstance(c, GPT2Config)}
    assert gpt == {"gpt2-350m": (24, 1024, 16, 50257, 1024),
                   "gpt2-1.6b": (24, 2048, 16, 50257, 1024),
                   "gpt2-13b": (40, 5120, 40, 50257, 1024),
                   "gpt2-175b": (96, 12288, 96, 50257, 1024)}
    # The names are the weight counts, to the paper's rounding (1.6B is the paper's name for
    # a 1.3e9-weight configuration).
    billions = {n: round(c.num_params / 1e9, 1) for n, c in presets.PRESETS.items()}
    assert billions == {"mlp-1b": 1.1, "mlp-17b": 17.2, "mlp-103b": 103.1, "gpt2-350m": 0.4,
                        "gpt2-1.6b": 1.3, "gpt2-13b": 12.8, "gpt2-175b": 174.6}


def test_overrides() -> None:
    cfg = presets.get("mlp-17b", batch_size=512, dtype=DType.Float16)
    assert (cfg.batch_size, cfg.dtype, cfg.num_layers) == (512, DType.Float16, 64)
    assert presets.get("mlp-17b").batch_size == presets.DEFAULT_MLP_BATCH
    assert presets.get("gpt2-13b", batch_size=8).batch_size == 8
    with pytest.raises(ConfigError, match="unknown model preset 'gpt3'.*mlp-1b"):
        presets.get("gpt3")
    with pytest.raises(ConfigError, match="has no field n_layer"):
        presets.get("mlp-1b", n_layer=3)


@pytest.mark.parametrize("name", presets.names("mlp"))
def test_mlp_presets_type(name: str) -> None:
    fn = presets.build(name, batch_size=1024)
    distir.verify(fn)
    out = distir.infer_types(fn)
    cfg = presets.get(name)
    assert out == tuple(TensorType(DType.Float32, (cfg.hidden_dim,) * 2, 0)
                        for _ in range(cfg.num_layers))
