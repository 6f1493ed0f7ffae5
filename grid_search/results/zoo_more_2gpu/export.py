"""Export the held-out models of this folder to ONNX, random weights, no download.

    python export.py t5 OUT.onnx        # HF T5EncoderModel, t5-base's encoder
    python export.py tvit OUT.onnx      # torchvision's ViT-B/16 structure, 1000 classes
    python export.py encoder OUT.onnx   # nn.TransformerEncoder 12 x 768 over an embedding
    python export.py efficientnet OUT.onnx  # EfficientNet-B0's stages at full width

``t5``: Hugging Face's ``T5EncoderModel`` from a config (12 layers, d_model 768, 12 heads of
64, d_ff 3072, relative position buckets, RMS norm, ReLU MLP; eager attention), input
``input_ids`` of symbolic ``batch`` x ``seq``, output the last hidden state; torchscript
export. ``tvit``: the zoo's ``tests.zoo.models.ViT`` (torchvision's VisionTransformer
structure, ``nn.MultiheadAttention``) at ViT-B/16's sizes, 224 x 224 images; torchscript.
``encoder``: the zoo's ``TransformerEncoder`` structure (an embedding, then
``nn.TransformerEncoder`` of post-norm ``nn.TransformerEncoderLayer``, batch first) at 12 x
768, 12 heads, feed-forward 3072, vocabulary 32000; dynamo. ``efficientnet``: the zoo's
``EfficientNetB0`` at width 1.0, 1000 classes, 224 x 224 images; torchscript.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import sys
import warnings
from pathlib import Path

import torch


class _First(torch.nn.Module):
    """A ``transformers`` model returning its first output as a tensor."""

    def __init__(self, m: torch.nn.Module) -> None:
        super().__init__()
        self.m = m

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.m(x, return_dict=False)[0]


class _Encoder(torch.nn.Module):
    def __init__(self, vocab: int, d: int, heads: int, layers: int) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        layer = torch.nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.1,
                                                 batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.encoder(self.embed(ids) * math.sqrt(self.embed.embedding_dim))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=["t5", "tvit", "encoder", "efficientnet"])
    ap.add_argument("out")
    a = ap.parse_args()
    torch.manual_seed(0)
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the project's root
    tokens = (torch.randint(0, 32000, (2, 8)),)
    image = (torch.randn(2, 3, 224, 224),)
    if a.model == "t5":
        from transformers import T5Config, T5EncoderModel

        cfg = T5Config(vocab_size=32128, d_model=768, d_kv=64, d_ff=3072, num_layers=12,
                       num_heads=12, use_cache=False, attn_implementation="eager")
        module: torch.nn.Module = _First(T5EncoderModel(cfg).eval())
        args, names, axes = tokens, ["input_ids"], [{0: "batch", 1: "seq"}]
        exporter, what = "torchscript", "T5EncoderModel 12 x 768, 12 heads, d_ff 3072"
    elif a.model == "tvit":
        from tests.zoo.models import ViT

        module = ViT(image=224, patch=16, hidden=768, layers=12, heads=12, mlp=3072,
                     classes=1000).eval()
        args, names, axes = image, ["x"], [{0: "batch"}]
        exporter, what = "torchscript", "torchvision ViT-B/16 structure, 224 x 224 images"
    elif a.model == "encoder":
        module = _Encoder(32000, 768, 12, 12).eval()
        args, names, axes = tokens, ["ids"], [{0: "batch", 1: "seq"}]
        exporter, what = "dynamo", "nn.TransformerEncoder 12 x 768, 12 heads, vocabulary 32000"
    else:
        from tests.zoo.models import EfficientNetB0

        module = EfficientNetB0(width=1.0, classes=1000).eval()
        args, names, axes = image, ["x"], [{0: "batch"}]
        exporter, what = "torchscript", "EfficientNet-B0 stages, width 1.0, 224 x 224 images"
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            torch.onnx.export(module, args, a.out, dynamo=False, input_names=names,
                              output_names=["y"], dynamic_axes=dict(zip(names, axes)))
        else:
            torch.onnx.export(module, args, dynamo=True, input_names=names, output_names=["y"],
                              dynamic_shapes=tuple(axes)).save(a.out)
    print(f"{a.out}: {what}, exported with {exporter}")


if __name__ == "__main__":
    main()
