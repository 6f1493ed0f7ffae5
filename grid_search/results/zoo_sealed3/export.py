"""Export the held-out models of this folder to ONNX, random weights, no download.

    python export.py convnext OUT.onnx  # HF ConvNextForImageClassification, ConvNeXt-T
    python export.py mobilenet OUT.onnx # HF MobileNetV2ForImageClassification, width 1.0
    python export.py neox OUT.onnx      # HF GPTNeoXModel at Pythia-160m's sizes
    python export.py opt OUT.onnx       # HF OPTModel at OPT-125m's sizes

``convnext``: Hugging Face's ``ConvNextForImageClassification`` from a config at
ConvNeXt-T's sizes (depths 3-3-9-3, widths 96-768, depthwise 7 x 7 convolutions, layer
norms over channels, layer scale), 224 x 224 images, 1000 classes; torchscript.
``mobilenet``: ``MobileNetV2ForImageClassification`` at width 1.0 (inverted residuals,
depthwise 3 x 3, ReLU6), 224 x 224 images; torchscript. ``neox``: ``GPTNeoXModel`` at
Pythia-160m's sizes (12 layers of 768, 12 heads, rotary embedding on a quarter of each
head, attention and MLP in parallel, GELU), input ``input_ids``, output the last hidden
state; dynamo. ``opt``: ``OPTModel`` at OPT-125m's sizes (12 layers of 768, 12 heads,
learned positions, ReLU MLP of 3072); torchscript. Each returns its first output.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the project's root

from tests.zoo.export import export  # noqa: E402
from tests.zoo.models import Spec, _FirstOutput, _image, _tokens  # noqa: E402


def _convnext() -> torch.nn.Module:
    from transformers import ConvNextConfig, ConvNextForImageClassification

    return _FirstOutput(ConvNextForImageClassification(ConvNextConfig(
        depths=[3, 3, 9, 3], hidden_sizes=[96, 192, 384, 768], num_labels=1000)))


def _mobilenet() -> torch.nn.Module:
    from transformers import MobileNetV2Config, MobileNetV2ForImageClassification

    return _FirstOutput(MobileNetV2ForImageClassification(MobileNetV2Config(
        depth_multiplier=1.0, image_size=224, num_labels=1000)))


def _neox() -> torch.nn.Module:
    from transformers import GPTNeoXConfig, GPTNeoXModel

    return _FirstOutput(GPTNeoXModel(GPTNeoXConfig(
        vocab_size=32000, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
        intermediate_size=3072, rotary_pct=0.25, use_parallel_residual=True, use_cache=False,
        attn_implementation="eager")))


def _opt() -> torch.nn.Module:
    from transformers import OPTConfig, OPTModel

    return _FirstOutput(OPTModel(OPTConfig(
        vocab_size=32000, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
        ffn_dim=3072, word_embed_proj_dim=768, max_position_embeddings=2048, use_cache=False,
        attn_implementation="eager")))


MODELS = {  # name: (build, inputs, input name, symbolic axes, exporter, what)
    "convnext": (_convnext, _image(224), "pixel_values", {0: "batch"}, "torchscript",
                 "HF ConvNeXt-T, 224 x 224 images"),
    "mobilenet": (_mobilenet, _image(224), "pixel_values", {0: "batch"}, "torchscript",
                  "HF MobileNetV2 1.0, 224 x 224 images"),
    "neox": (_neox, _tokens(32000, False), "input_ids", {0: "batch", 1: "seq"}, "dynamo",
             "HF GPT-NeoX at Pythia-160m's sizes"),
    "opt": (_opt, _tokens(32000, False), "input_ids", {0: "batch", 1: "seq"}, "torchscript",
            "HF OPT at OPT-125m's sizes"),
}


def main(models: dict | None = None) -> None:
    """Export the model named on the command line, of ``models`` (default this file's)."""
    models = MODELS if models is None else models
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=sorted(models))
    ap.add_argument("out")
    a = ap.parse_args()
    build, inputs, name, axes, exporter, what = models[a.model]

    def seeded() -> torch.nn.Module:
        torch.manual_seed(0)
        return build().eval()

    export(Spec(a.model, "held out", seeded, inputs, (name,), (axes,)), exporter, a.out)
    print(f"{a.out}: {what}, exported with {exporter}")


if __name__ == "__main__":
    main()
