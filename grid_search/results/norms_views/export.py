"""Export three models to ONNX that no cost-model work looked at, random weights, no
download:

    python export.py bit OUT.onnx      # HF BitForImageClassification, BiT-R50x1 (defaults)
    python export.py levit OUT.onnx    # HF LevitForImageClassification, LeViT-128S (defaults)
    python export.py deberta OUT.onnx  # HF DebertaV2Model at DeBERTa-v3-base's sizes
    python export.py hiera OUT.onnx    # HF HieraForImageClassification, Hiera-B (defaults)
    python export.py deberta_dynamo OUT.onnx   # the same DeBERTa, by the dynamo exporter

``bit``: Hugging Face's default BiT config (ResNet-50 x 1 layout, pre-activation blocks,
weight-standardized convolutions, group norms of 32 groups), 224 x 224 images, 1000
classes; dynamo. ``levit``: the default LeViT config (LeViT-128S: a stem of four stride-2
convolutions, attention and MLP blocks of linear layers each followed by a batch
normalization, Hardswish, attention biases gathered from a table, shrinking attention
between stages), 224 x 224 images, 1000 classes; dynamo. ``deberta``: ``DebertaV2Model``
(hidden states) at DeBERTa-v3-base's sizes (12 layers of 768, 12 heads, disentangled
attention over relative positions: content-to-position and position-to-content scores
gathered from products with a shared table of 256 relative-position embeddings, log
buckets), vocabulary 32,000; torchscript. ``hiera``: the default Hiera config (Hiera-B:
embedding 96, stages of 2-3-16-3 blocks, mask-unit windowed attention in the first two
stages, queries max-pooled between stages, unroll and reroll reshapes, no convolution but
the patch embedding), 224 x 224 images, 1000 classes; dynamo. Each returns its first
output.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the project's root

from tests.zoo.models import _FirstOutput, _image, _tokens  # noqa: E402


def _bit() -> torch.nn.Module:
    from transformers import BitConfig, BitForImageClassification

    return _FirstOutput(BitForImageClassification(BitConfig(num_labels=1000)))


def _levit() -> torch.nn.Module:
    from transformers import LevitConfig, LevitForImageClassification

    return _FirstOutput(LevitForImageClassification(LevitConfig(num_labels=1000)))


def _deberta() -> torch.nn.Module:
    from transformers import DebertaV2Config, DebertaV2Model

    return _FirstOutput(DebertaV2Model(DebertaV2Config(
        vocab_size=32000, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
        intermediate_size=3072, relative_attention=True, position_buckets=256,
        norm_rel_ebd="layer_norm", share_att_key=True, pos_att_type=["p2c", "c2p"],
        max_relative_positions=-1, position_biased_input=False)))


def _hiera() -> torch.nn.Module:
    from transformers import HieraConfig, HieraForImageClassification

    return _FirstOutput(HieraForImageClassification(HieraConfig(num_labels=1000)))


MODELS = {  # name: (build, inputs, input name, symbolic axes, exporter, what)
    "bit": (_bit, _image(224), "pixel_values", {0: "batch"}, "dynamo",
            "HF BiT-R50x1, 224 x 224 images"),
    "levit": (_levit, _image(224), "pixel_values", {0: "batch"}, "dynamo",
              "HF LeViT-128S, 224 x 224 images"),
    "deberta": (_deberta, _tokens(32000, False), "input_ids", {0: "batch", 1: "seq"},
                "torchscript", "HF DeBERTa-v2 at DeBERTa-v3-base's sizes"),
    "deberta_dynamo": (_deberta, _tokens(32000, False), "input_ids", {0: "batch", 1: "seq"},
                       "dynamo", "HF DeBERTa-v2 at DeBERTa-v3-base's sizes"),
    "hiera": (_hiera, _image(224), "pixel_values", {0: "batch"}, "dynamo",
              "HF Hiera-B, 224 x 224 images"),
}


if __name__ == "__main__":
    _spec = importlib.util.spec_from_file_location(
        "zoo_sealed3_export", Path(__file__).resolve().parent.parent / "zoo_sealed3" / "export.py")
    assert _spec is not None and _spec.loader is not None
    sealed3 = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sealed3)
    sealed3.main(MODELS)
