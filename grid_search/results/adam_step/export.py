"""Export models to ONNX that no cost-model work looked at, random weights, no download:

    python export.py albert OUT.onnx      # HF AlbertModel, ALBERT-base (defaults)
    python export.py dinov2 OUT.onnx      # HF Dinov2ForImageClassification, ViT-B/14
    python export.py mobilebert OUT.onnx  # HF MobileBertModel (defaults)
    python export.py beit OUT.onnx        # HF BeitForImageClassification, BEiT-base
    python export.py squeezebert OUT.onnx # HF SqueezeBertModel (defaults)
    python export.py convbert OUT.onnx    # HF ConvBertModel, ConvBERT-base (defaults)

``albert``: the default ALBERT config (ALBERT-base: 12 layers of 768 that share one layer's
weights, embeddings of 128 projected to 768, vocabulary 30,000), hidden states; dynamo.
``dinov2``: Hugging Face's default DINOv2 config (ViT-B/14: 12 layers of 768, patches of
14, layer scale, position embeddings made for 518 x 518 images and interpolated
(bicubic) to the input's 224 x 224), 1000 classes; dynamo. ``mobilebert``: the default
MobileBERT config (24 layers, bottlenecks of 128 inside a 512-wide residual stream, four
feed-forward blocks a layer, ``NoNorm`` affine norms), hidden states; dynamo. ``beit``:
the default BEiT config (BEiT-base: 12 layers of 768, patches of 16, relative position
biases gathered from a table per layer, layer scale, mean-pooled patches), 224 x 224
images, 1000 classes, eager attention (torch's dynamo exporter fails to decompose its SDPA
attention: "Cannot view a tensor with shape [b, 197, 12, 64] ... as [b, 197, 768]");
dynamo. ``squeezebert``: the default SqueezeBERT config (12 layers of 768 whose
projections are grouped 1-D convolutions of kernel 1: 4 groups for q, k, v and the
intermediate layer, 1 and 4 after; a vocabulary of 30,528), hidden states; dynamo.
``convbert``: the default ConvBERT config (ConvBERT-base: 12 layers of 768, half the heads
self-attention and half span-based dynamic convolutions, whose keys come from a separable
1-D convolution of the tokens: depthwise of kernel 9, then pointwise; a vocabulary of
30,522), hidden states; dynamo. Each returns its first output.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the project's root

from tests.zoo.models import _FirstOutput, _image, _tokens  # noqa: E402


def _albert() -> torch.nn.Module:
    from transformers import AlbertConfig, AlbertModel

    return _FirstOutput(AlbertModel(AlbertConfig(hidden_size=768, num_attention_heads=12,
                                                 intermediate_size=3072),
                                    add_pooling_layer=False))


def _dinov2() -> torch.nn.Module:
    from transformers import Dinov2Config, Dinov2ForImageClassification

    return _FirstOutput(Dinov2ForImageClassification(Dinov2Config(num_labels=1000)))


def _mobilebert() -> torch.nn.Module:
    from transformers import MobileBertConfig, MobileBertModel

    return _FirstOutput(MobileBertModel(MobileBertConfig(), add_pooling_layer=False))


def _beit() -> torch.nn.Module:
    from transformers import BeitConfig, BeitForImageClassification

    return _FirstOutput(BeitForImageClassification(BeitConfig(
        num_labels=1000, use_relative_position_bias=True, use_mean_pooling=True,
        layer_scale_init_value=0.1, attn_implementation="eager")))


def _squeezebert() -> torch.nn.Module:
    from transformers import SqueezeBertConfig, SqueezeBertModel

    return _FirstOutput(SqueezeBertModel(SqueezeBertConfig()))


def _convbert() -> torch.nn.Module:
    from transformers import ConvBertConfig, ConvBertModel

    return _FirstOutput(ConvBertModel(ConvBertConfig()))


MODELS = {  # name: (build, inputs, input name, symbolic axes, exporter, what)
    "albert": (_albert, _tokens(30000, False), "input_ids", {0: "batch", 1: "seq"},
               "dynamo", "HF ALBERT-base (shared layers)"),
    "dinov2": (_dinov2, _image(224), "pixel_values", {0: "batch"}, "dynamo",
               "HF DINOv2 ViT-B/14, 224 x 224 images"),
    "mobilebert": (_mobilebert, _tokens(30522, False), "input_ids", {0: "batch", 1: "seq"},
                   "dynamo", "HF MobileBERT"),
    "beit": (_beit, _image(224), "pixel_values", {0: "batch"}, "dynamo",
             "HF BEiT-base, 224 x 224 images"),
    "squeezebert": (_squeezebert, _tokens(30528, False), "input_ids", {0: "batch", 1: "seq"},
                    "dynamo", "HF SqueezeBERT"),
    "convbert": (_convbert, _tokens(30522, False), "input_ids", {0: "batch", 1: "seq"},
                 "dynamo", "HF ConvBERT-base"),
}


if __name__ == "__main__":
    _spec = importlib.util.spec_from_file_location(
        "zoo_sealed3_export", Path(__file__).resolve().parent.parent / "zoo_sealed3" / "export.py")
    assert _spec is not None and _spec.loader is not None
    sealed3 = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sealed3)
    sealed3.main(MODELS)
