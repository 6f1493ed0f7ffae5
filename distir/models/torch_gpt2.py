"""GPT-2 as a PyTorch ``nn.Module``, and its export to ONNX by both torch exporters.

The standard pre-LN GPT-2: token and learned position embeddings, ``n_layer`` blocks of
``x + attn(ln_1(x))`` then ``x + mlp(ln_2(x))`` with causal multi-head self-attention and a
``4·d`` tanh-GELU MLP, a final LayerNorm, and an LM head tied to the token embedding.
Parameter names follow GPT-2's (``wte``, ``h.3.attn.c_attn``, ``ln_f``...), the same names
as the graph inputs of ``distir.models.gpt2`` (with ``nn.Linear`` weights stored
transposed), so ``load_weights`` can give this module the weights of that graph and the two
be compared.

This is the only module of ``distir.models`` that imports ``torch``; import it only when a
torch model is wanted.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import nn

from distir.errors import ConfigError
from distir.models.gpt2 import GPT2Config

__all__ = ["GPT2", "export_gpt2_onnx", "load_weights"]


class _Attention(nn.Module):
    def __init__(self, cfg: GPT2Config) -> None:
        super().__init__()
        d, n = cfg.d_model, cfg.n_ctx
        self.n_head, self.head_dim, self.d_model = cfg.n_head, cfg.head_dim, d
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        causal = torch.tril(torch.ones(n, n, dtype=torch.bool)).view(1, 1, n, n)
        self.causal: torch.Tensor
        self.register_buffer("causal", causal, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.size()
        q, k, v = self.c_attn(x).split(self.d_model, dim=2)
        q = q.view(b, t, self.n_head, self.head_dim).transpose(1, 2)  # (B, H, T, hd)
        k = k.view(b, t, self.n_head, self.head_dim).transpose(1, 2)
        v = v.view(b, t, self.n_head, self.head_dim).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        visible = self.causal[:, :, :t, :t]
        scores = scores.masked_fill(~visible, torch.finfo(scores.dtype).min)
        ctx = torch.softmax(scores, dim=-1) @ v  # (B, H, T, hd)
        return self.c_proj(ctx.transpose(1, 2).contiguous().view(b, t, d))


class _MLP(nn.Module):
    def __init__(self, cfg: GPT2Config) -> None:
        super().__init__()
        self.c_fc = nn.Linear(cfg.d_model, 4 * cfg.d_model)
        self.act = nn.GELU(approximate=cfg.gelu)
        self.c_proj = nn.Linear(4 * cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.act(self.c_fc(x)))


class _Block(nn.Module):
    def __init__(self, cfg: GPT2Config) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.d_model, eps=cfg.eps)
        self.attn = _Attention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.d_model, eps=cfg.eps)
        self.mlp = _MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    """GPT-2 inference: ``forward(input_ids (B, T) int64) -> logits (B, T, vocab)``.

    Sizes come from a ``GPT2Config`` (its ``batch_size`` and ``seq_len`` only size the
    example input of ``export_gpt2_onnx``; ``n_ctx`` bounds ``T``). Weights are
    initialized as GPT-2 does (normal, std 0.02) from ``torch.manual_seed(seed)``.
    """

    def __init__(self, cfg: GPT2Config, seed: int = 0) -> None:
        super().__init__()
        if cfg.dtype.np != np.float32:
            raise ConfigError(f"the torch GPT-2 is Float32 only, got {cfg.dtype.value}")
        self.cfg = cfg
        gen = torch.Generator().manual_seed(seed)
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.wpe = nn.Embedding(cfg.n_ctx, cfg.d_model)
        self.h = nn.ModuleList(_Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model, eps=cfg.eps)
        with torch.no_grad():
            # Biases are random too, and LayerNorm scales near 1 rather than exactly 1, so
            # that a comparison is sensitive to every parameter.
            for name, p in self.named_parameters():
                p.normal_(0.0, 0.02, generator=gen)
                if "ln_" in name and name.endswith("weight"):
                    p.add_(1.0)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        t = input_ids.size(1)
        pos = torch.arange(t, dtype=torch.long, device=input_ids.device).unsqueeze(0)
        x = self.wte(input_ids) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()


def load_weights(model: GPT2, weights: Mapping[str, np.ndarray] | Sequence[np.ndarray],
                 ) -> GPT2:
    """Give ``model`` the weights of ``distir.models.gpt2``'s graph inputs (a mapping by
    input name, or the list in input order with or without ``input_ids`` first). Linear
    weights are stored ``(in, out)`` there and ``(out, in)`` here, so they are transposed."""
    names = list(model.cfg.weight_shapes())
    if not isinstance(weights, Mapping):
        arrs = list(weights)
        if len(arrs) == len(names) + 1:
            arrs = arrs[1:]
        if len(arrs) != len(names):
            raise ConfigError(f"load_weights: {len(arrs)} arrays given, the model has "
                              f"{len(names)} weights")
        weights = dict(zip(names, arrs, strict=True))
    state = {}
    for name in names:
        if name not in weights:
            raise ConfigError(f"load_weights: weight {name!r} is missing")
        arr = torch.from_numpy(np.ascontiguousarray(weights[name]))
        is_linear = name.endswith(".weight") and (".c_" in name)
        key = f"{name}.weight" if name in ("wte", "wpe") else name
        state[key] = arr.t().contiguous() if is_linear else arr
    model.load_state_dict(state, strict=True)
    return model


def export_gpt2_onnx(model: GPT2, path: str | os.PathLike[str], *, dynamo: bool = False,
                     opset: int | None = None, dynamic: bool = False,
                     external_data: bool = False) -> str:
    """Export ``model`` to ONNX at ``path`` with ``torch.onnx.export``; returns the path.

    ``dynamo=False`` uses the TorchScript exporter (opset 20 by default, its newest);
    ``dynamo=True`` the ``torch.export`` based one (needs ``onnxscript``; opset 21 by
    default). The example input is ``cfg.batch_size × cfg.seq_len`` token ids, named
    ``input_ids``; the output is ``logits``. With ``dynamic``, batch and sequence are symbolic
    dimensions named ``batch`` and ``seq`` (bind them when importing). With
    ``external_data`` (dynamo only), weights go to a file beside ``path``.
    """
    cfg = model.cfg
    ids = torch.zeros((cfg.batch_size, cfg.seq_len), dtype=torch.long)
    path = os.fspath(path)
    model.eval()
    if dynamo:
        shapes = None
        if dynamic:
            shapes = {"input_ids": {0: torch.export.Dim("batch"), 1: torch.export.Dim("seq")}}
        torch.onnx.export(model, (ids,), path, dynamo=True, opset_version=opset or 21,
                          input_names=["input_ids"], output_names=["logits"],
                          dynamic_shapes=shapes, external_data=external_data,
                          verbose=False)
    else:
        axes = {"input_ids": {0: "batch", 1: "seq"},
                "logits": {0: "batch", 1: "seq"}} if dynamic else None
        with warnings.catch_warnings():
            # The caller chose the legacy exporter; its deprecation notice is not news.
            warnings.simplefilter("ignore", DeprecationWarning)
            torch.onnx.export(model, (ids,), path, dynamo=False, opset_version=opset or 20,
                              input_names=["input_ids"], output_names=["logits"],
                              dynamic_axes=axes)
    return path
