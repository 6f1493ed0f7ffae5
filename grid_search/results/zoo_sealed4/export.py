"""Export the held-out models of this folder to ONNX, random weights, no download.

    python export.py segformer OUT.onnx  # HF SegformerForImageClassification, MiT-b0
    python export.py regnet OUT.onnx     # HF RegNetForImageClassification (its defaults)
    python export.py mobilenetv3 OUT.onnx  # tests/zoo's torchvision-layout MobileNetV3-Small, 1.0
    python export.py qwen2 OUT.onnx      # HF Qwen2Model, 12 x 768, 4 key-value heads

``segformer``: MiT-b0's sizes (hidden 32-64-160-256, depths 2-2-2-2, reduced-key attention
ratios 8-4-2-1, a depthwise 3 x 3 in each Mix-FFN, layer norms over 32 to 256 channels),
224 x 224 images, 1000 classes; dynamo. ``regnet``: Hugging Face's default RegNet config
(RegNetY-like: grouped 3 x 3 of 64 channels per group, squeeze-excitation, widths 128 to
1088), 224 x 224 images; torchscript. ``mobilenetv3``: ``tests/zoo/models.py``'s
``MobileNetV3Small`` at width 1.0 and 1000 classes (hard-swish, squeeze-excitation,
depthwise 3 x 3 and 5 x 5), 224 x 224; dynamo. ``qwen2``: ``Qwen2Model`` 12 layers of 768,
12 heads over 4 key-value heads, SwiGLU of 2048, RMS norm, rotary embedding; dynamo. Each
returns its first output.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the project's root

from tests.zoo.models import MobileNetV3Small, _FirstOutput, _image, _tokens  # noqa: E402


def _segformer() -> torch.nn.Module:
    from transformers import SegformerConfig, SegformerForImageClassification

    return _FirstOutput(SegformerForImageClassification(SegformerConfig(
        hidden_sizes=[32, 64, 160, 256], depths=[2, 2, 2, 2], sr_ratios=[8, 4, 2, 1],
        num_attention_heads=[1, 2, 5, 8], decoder_hidden_size=256, num_labels=1000)))


def _regnet() -> torch.nn.Module:
    from transformers import RegNetConfig, RegNetForImageClassification

    return _FirstOutput(RegNetForImageClassification(RegNetConfig(num_labels=1000)))


def _qwen2() -> torch.nn.Module:
    from transformers import Qwen2Config, Qwen2Model

    return _FirstOutput(Qwen2Model(Qwen2Config(
        vocab_size=32000, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
        num_key_value_heads=4, intermediate_size=2048, max_position_embeddings=2048,
        use_cache=False, attn_implementation="eager")))


MODELS = {  # name: (build, inputs, input name, symbolic axes, exporter, what)
    "segformer": (_segformer, _image(224), "pixel_values", {0: "batch"}, "dynamo",
                  "HF SegFormer MiT-b0, 224 x 224 images"),
    "regnet": (_regnet, _image(224), "pixel_values", {0: "batch"}, "torchscript",
               "HF RegNet (default config), 224 x 224 images"),
    "mobilenetv3": (lambda: MobileNetV3Small(1.0, 1000), _image(224), "x", {0: "batch"},
                    "dynamo", "torchvision-layout MobileNetV3-Small 1.0, 224 x 224 images"),
    "qwen2": (_qwen2, _tokens(32000, False), "input_ids", {0: "batch", 1: "seq"}, "dynamo",
              "HF Qwen2 12 x 768"),
}


if __name__ == "__main__":
    _spec = importlib.util.spec_from_file_location(
        "zoo_sealed3_export", Path(__file__).resolve().parent.parent / "zoo_sealed3" / "export.py")
    assert _spec is not None and _spec.loader is not None
    sealed3 = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sealed3)
    sealed3.main(MODELS)
