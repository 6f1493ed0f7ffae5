"""Export two models to ONNX that no cost-model work looked at, random weights, no
download; both hand convolutions permuted views of token tensors (channels-last inputs).

    python export.py pvt_v2 OUT.onnx     # HF PvtV2ForImageClassification, b0 sizes
    python export.py mobilevit OUT.onnx  # HF MobileViTForImageClassification, XXS sizes
    python export.py cvt OUT.onnx        # HF CvtForImageClassification, CvT-13 (its defaults)
    python export.py focalnet OUT.onnx   # HF FocalNetForImageClassification, FocalNet-T
    python export.py convnextv2 OUT.onnx # HF ConvNextV2ForImageClassification, atto sizes
    python export.py swin OUT.onnx       # HF SwinForImageClassification, Swin-T
    python export.py swinv2 OUT.onnx     # HF Swinv2ForImageClassification, Swin-V2-T
    python export.py poolformer OUT.onnx # HF PoolFormerForImageClassification, S12
    python export.py poolformer_m36 OUT.onnx   # HF PoolFormerForImageClassification, M36

``pvt_v2``: PVT-v2-b0's sizes (hidden 32-64-160-256, depths 2-2-2-2, reduced-key attention
ratios 8-4-2-1, a depthwise 3 x 3 in each feed-forward), 224 x 224 images, 1000 classes;
dynamo. ``mobilevit``: MobileViT-XXS's sizes (hidden 64-80-96, MobileNetV2 blocks with
depthwise 3 x 3, transformers over unfolded 2 x 2 patches folded back into images),
256 x 256 images, 1000 classes; dynamo. ``cvt``: Hugging Face's default CvT config (CvT-13:
convolutional token embeddings, and the queries, keys and values projected by a depthwise
3 x 3 and a batch normalization of the tokens viewed as an image), 224 x 224 images, 1000
classes; dynamo. ``focalnet``: FocalNet-T (Hugging Face's default config: embedding 96,
depths 2-2-6-2, two focal levels of windows 3; focal modulation: a linear layer's tokens
permuted to an image and split into queries, context and gates, depthwise convolutions over
the context; an adaptive pool, exported as a gather from the flattened batch), 224 x 224,
dynamo. ``convnextv2``:
ConvNeXt-V2 at atto's sizes (widths 40-320, depths 2-2-6-2, global response
normalization), 224 x 224, dynamo. ``swin``: Swin-T (Hugging Face's default config:
embedding 96, depths 2-2-6-2, 3-24 heads, shifted 7 x 7 windows, patch merging by strided
slices), 224 x 224, torchscript (torch's dynamo exporter fails on it). ``swinv2``:
Swin-V2-T at 256 x 256 (Hugging Face's default config but 8 x 8 windows, as the
published ``swinv2-tiny-patch4-window8-256``: scaled cosine attention, a continuous
position bias from a small network, post-normalization), torchscript. ``poolformer``:
PoolFormer-S12 (Hugging Face's default config: average pooling as the token mixer, group
norms of one group, 1 x 1 convolutions as the channel MLP), 224 x 224, dynamo.
``poolformer_m36``: PoolFormer-M36 (widths 96-192-384-768, depths 6-6-18-6, layer scale
1e-6), 224 x 224, dynamo. Each returns its first output.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the project's root

from tests.zoo.models import _FirstOutput, _image  # noqa: E402


def _pvt_v2() -> torch.nn.Module:
    from transformers import PvtV2Config, PvtV2ForImageClassification

    return _FirstOutput(PvtV2ForImageClassification(PvtV2Config(
        hidden_sizes=[32, 64, 160, 256], depths=[2, 2, 2, 2], sr_ratios=[8, 4, 2, 1],
        num_attention_heads=[1, 2, 5, 8], num_labels=1000)))


def _cvt() -> torch.nn.Module:
    from transformers import CvtConfig, CvtForImageClassification

    return _FirstOutput(CvtForImageClassification(CvtConfig(num_labels=1000)))


def _focalnet() -> torch.nn.Module:
    from transformers import FocalNetConfig, FocalNetForImageClassification

    return _FirstOutput(FocalNetForImageClassification(FocalNetConfig(num_labels=1000)))


def _convnextv2() -> torch.nn.Module:
    from transformers import ConvNextV2Config, ConvNextV2ForImageClassification

    return _FirstOutput(ConvNextV2ForImageClassification(ConvNextV2Config(
        hidden_sizes=[40, 80, 160, 320], depths=[2, 2, 6, 2], num_labels=1000)))


def _swin() -> torch.nn.Module:
    from transformers import SwinConfig, SwinForImageClassification

    return _FirstOutput(SwinForImageClassification(SwinConfig(num_labels=1000)))


def _swinv2() -> torch.nn.Module:
    from transformers import Swinv2Config, Swinv2ForImageClassification

    return _FirstOutput(Swinv2ForImageClassification(Swinv2Config(
        image_size=256, window_size=8, num_labels=1000)))


def _poolformer() -> torch.nn.Module:
    from transformers import PoolFormerConfig, PoolFormerForImageClassification

    return _FirstOutput(PoolFormerForImageClassification(PoolFormerConfig(num_labels=1000)))


def _poolformer_m36() -> torch.nn.Module:
    from transformers import PoolFormerConfig, PoolFormerForImageClassification

    return _FirstOutput(PoolFormerForImageClassification(PoolFormerConfig(
        hidden_sizes=[96, 192, 384, 768], depths=[6, 6, 18, 6], layer_scale_init_value=1e-6,
        num_labels=1000)))


def _mobilevit() -> torch.nn.Module:
    from transformers import MobileViTConfig, MobileViTForImageClassification

    return _FirstOutput(MobileViTForImageClassification(MobileViTConfig(
        hidden_sizes=[64, 80, 96], neck_hidden_sizes=[16, 16, 24, 48, 64, 80, 320],
        expand_ratio=2.0, num_labels=1000, image_size=256)))


MODELS = {  # name: (build, inputs, input name, symbolic axes, exporter, what)
    "pvt_v2": (_pvt_v2, _image(224), "pixel_values", {0: "batch"}, "dynamo",
               "HF PVT-v2 b0, 224 x 224 images"),
    "cvt": (_cvt, _image(224), "pixel_values", {0: "batch"}, "dynamo",
            "HF CvT-13, 224 x 224 images"),
    "focalnet": (_focalnet, _image(224), "pixel_values", {0: "batch"}, "dynamo",
                 "HF FocalNet-T, 224 x 224 images"),
    "convnextv2": (_convnextv2, _image(224), "pixel_values", {0: "batch"}, "dynamo",
                   "HF ConvNeXt-V2 atto sizes, 224 x 224 images"),
    "swin": (_swin, _image(224), "pixel_values", {0: "batch"}, "torchscript",
             "HF Swin-T, 224 x 224 images"),
    "swinv2": (_swinv2, _image(256), "pixel_values", {0: "batch"}, "torchscript",
               "HF Swin-V2-T, 256 x 256 images, 8 x 8 windows"),
    "poolformer": (_poolformer, _image(224), "pixel_values", {0: "batch"}, "dynamo",
                   "HF PoolFormer-S12, 224 x 224 images"),
    "poolformer_m36": (_poolformer_m36, _image(224), "pixel_values", {0: "batch"},
                       "dynamo", "HF PoolFormer-M36, 224 x 224 images"),
    "mobilevit": (_mobilevit, _image(256), "pixel_values", {0: "batch"}, "dynamo",
                  "HF MobileViT-XXS, 256 x 256 images"),
}


if __name__ == "__main__":
    _spec = importlib.util.spec_from_file_location(
        "zoo_sealed3_export", Path(__file__).resolve().parent.parent / "zoo_sealed3" / "export.py")
    assert _spec is not None and _spec.loader is not None
    sealed3 = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sealed3)
    sealed3.main(MODELS)
