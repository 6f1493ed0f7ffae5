"""The zoo's models: ordinary architectures with random weights, at small sizes.

Each ``Spec`` builds a module (seeded, in eval mode) and example inputs whose leading
dimensions are symbolic in the export (``batch``, and ``seq`` for token models).

Sizes are chosen so that the whole zoo exports in well under a minute on two cores; every
architecture keeps its structure (block types, activations, SE blocks, attention, class token,
position embeddings), and what is scaled down is written beside it:

- ``resnet18``, ``resnet50``: torchvision's layout (BasicBlock x [2, 2, 2, 2]; Bottleneck x
  [3, 4, 6, 3], expansion 4), base width 8 instead of 64, 32x32 images, 10 classes.
- ``mobilenet_v3_small``: torchvision's 11 inverted-residual blocks (kernel, expansion, SE,
  HardSwish/ReLU, stride as in the paper), width multiplier 0.25, 64x64 images.
- ``efficientnet_b0``: the 7 MBConv stages (16 blocks; SiLU, SE at 0.25, depthwise 3x3 and
  5x5), width multiplier 0.25, 64x64 images; stochastic depth is an identity in eval.
- ``vit_b16``: torchvision's ViT (16x16 patch conv, class token, learned position
  embedding, pre-norm encoder blocks with ``nn.MultiheadAttention``), hidden 32, 2 layers,
  4 heads, 32x32 images (4 patches).
- Hugging Face ``transformers`` models from ``Config`` objects (no download): hidden 32,
  2 layers, 4 heads, vocabulary 128; sequences of 8 tokens (ViT: 32x32 images, patch 8).
- ``transformer_encoder``: ``nn.TransformerEncoder`` (d_model 32, 4 heads, 2 layers,
  batch first); ``conv1d``: a 1-D conv net (Conv1d, BatchNorm1d, ReLU, MaxPool1d, global
  average pool, Linear) on 64-sample sequences.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

BATCH = 2
"""The example batch size (not 1: ``torch.export`` specializes a dimension of size 1)."""
SEQ = 8
"""The example sequence length of token models."""


@dataclass(frozen=True)
class Spec:
    """A zoo model: ``build()`` returns the module in eval mode, ``inputs(batch, seq)`` its
    example inputs (one per name of ``input_names``), ``dynamic[i]`` maps input ``i``'s
    symbolic axes to their names."""

    name: str
    family: str
    build: Callable[[], nn.Module]
    inputs: Callable[[int, int], tuple[torch.Tensor, ...]]
    input_names: tuple[str, ...]
    dynamic: tuple[dict[int, str], ...]

    def dims(self, batch: int = BATCH, seq: int = SEQ) -> dict[str, int]:
        """The sizes of the symbolic dimensions for ``inputs(batch, seq)``."""
        sizes = {"batch": batch, "seq": seq}
        return {n: sizes[n] for d in self.dynamic for n in d.values()}


def _seeded(build: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    def make() -> nn.Module:
        torch.manual_seed(0)
        m = build()
        # Random batch-norm statistics, so that normalization is not an identity.
        with torch.no_grad():
            for mod in m.modules():
                if isinstance(mod, nn.modules.batchnorm._BatchNorm):
                    mod.running_mean.uniform_(-0.1, 0.1)
                    mod.running_var.uniform_(0.5, 1.5)
        return m.eval()
    return make


def _image(size: int) -> Callable[[int, int], tuple[torch.Tensor, ...]]:
    def inputs(batch: int, seq: int) -> tuple[torch.Tensor, ...]:
        g = torch.Generator().manual_seed(1)
        return (torch.rand(batch, 3, size, size, generator=g),)
    return inputs


def _tokens(vocab: int, mask: bool) -> Callable[[int, int], tuple[torch.Tensor, ...]]:
    def inputs(batch: int, seq: int) -> tuple[torch.Tensor, ...]:
        g = torch.Generator().manual_seed(1)
        ids = torch.randint(0, vocab, (batch, seq), generator=g)
        if not mask:
            return (ids,)
        m = torch.ones(batch, seq, dtype=torch.int64)
        m[0, seq - 2:] = 0  # padding in the first row
        return ids, m
    return inputs


# ----------------------------------------------------------------------------- ResNet


class _Basic(nn.Module):
    expansion = 1

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _shortcut(cin, cout, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return self.relu(y + self.downsample(x))


class _Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _shortcut(cin, cout, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return self.relu(y + self.downsample(x))


def _shortcut(cin: int, cout: int, stride: int) -> nn.Module:
    if stride == 1 and cin == cout:
        return nn.Identity()
    return nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))


class ResNet(nn.Module):
    def __init__(self, block: type[_Basic] | type[_Bottleneck], layers: list[int],
                 base: int = 8, classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, base, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(base)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        cin = base
        stages = []
        for i, n in enumerate(layers):
            blocks = []
            for j in range(n):
                blocks.append(block(cin, base << i, 2 if i > 0 and j == 0 else 1))
                cin = (base << i) * block.expansion
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


# ---------------------------------------------------------------- MobileNetV3, EfficientNet


def _div8(c: float) -> int:
    """torchvision's ``_make_divisible(c, 8)``."""
    v = max(8, int(c + 4) // 8 * 8)
    return v + 8 if v < 0.9 * c else v


class _SE(nn.Module):
    def __init__(self, c: int, squeeze: int, act: type[nn.Module],
                 gate: type[nn.Module]) -> None:
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(c, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, c, 1)
        self.activation = act()
        self.scale_activation = gate()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(x)))))
        return x * s


def _cba(cin: int, cout: int, k: int, stride: int, groups: int,
         act: type[nn.Module] | None) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups,
                                         bias=False), nn.BatchNorm2d(cout)]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


class _InvertedResidual(nn.Module):
    """MobileNetV3's and EfficientNet's block: expand 1x1, depthwise kxk, SE, project 1x1."""

    def __init__(self, cin: int, exp: int, cout: int, k: int, stride: int,
                 se: _SE | None, act: type[nn.Module]) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        if exp != cin:
            layers.append(_cba(cin, exp, 1, 1, 1, act))
        layers.append(_cba(exp, exp, k, stride, exp, act))
        if se is not None:
            layers.append(se)
        layers.append(_cba(exp, cout, 1, 1, 1, None))
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        return x + y if self.residual else y


# (kernel, expanded, out, SE, HardSwish, stride): torchvision's mobilenet_v3_small.
_MBV3_SMALL = [(3, 16, 16, True, False, 2), (3, 72, 24, False, False, 2),
               (3, 88, 24, False, False, 1), (5, 96, 40, True, True, 2),
               (5, 240, 40, True, True, 1), (5, 240, 40, True, True, 1),
               (5, 120, 48, True, True, 1), (5, 144, 48, True, True, 1),
               (5, 288, 96, True, True, 2), (5, 576, 96, True, True, 1),
               (5, 576, 96, True, True, 1)]


class MobileNetV3Small(nn.Module):
    def __init__(self, width: float = 0.25, classes: int = 10) -> None:
        super().__init__()
        c0 = _div8(16 * width)
        layers: list[nn.Module] = [_cba(3, c0, 3, 2, 1, nn.Hardswish)]
        cin = c0
        for k, e, o, se, hs, s in _MBV3_SMALL:
            exp, cout = _div8(e * width), _div8(o * width)
            act: type[nn.Module] = nn.Hardswish if hs else nn.ReLU
            blk_se = _SE(exp, _div8(exp // 4), nn.ReLU, nn.Hardsigmoid) if se else None
            layers.append(_InvertedResidual(cin, exp, cout, k, s, blk_se, act))
            cin = cout
        last = 6 * cin
        layers.append(_cba(cin, last, 1, 1, 1, nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(last, 64), nn.Hardswish(), nn.Dropout(0.2),
                                        nn.Linear(64, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


# (expand ratio, kernel, stride, in, out, repeats): EfficientNet-B0's stages.
_B0 = [(1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2),
       (6, 3, 2, 40, 80, 3), (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4),
       (6, 3, 1, 192, 320, 1)]


class EfficientNetB0(nn.Module):
    def __init__(self, width: float = 0.25, classes: int = 10) -> None:
        super().__init__()
        c0 = _div8(32 * width)
        layers: list[nn.Module] = [_cba(3, c0, 3, 2, 1, nn.SiLU)]
        cin = c0
        for ratio, k, stride, i, o, n in _B0:
            cout = _div8(o * width)
            for j in range(n):
                exp = _div8(cin * ratio)
                squeeze = max(1, _div8(i * width) // 4 if j == 0 else cout // 4)
                se = _SE(exp, squeeze, nn.SiLU, nn.Sigmoid)
                layers.append(_InvertedResidual(cin, exp, cout, k, stride if j == 0 else 1,
                                                se, nn.SiLU))
                cin = cout
        last = 4 * cin
        layers.append(_cba(cin, last, 1, 1, 1, nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


# --------------------------------------------------------------------------------- ViT


class _EncoderBlock(nn.Module):
    def __init__(self, hidden: int, heads: int, mlp: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden, eps=1e-6)
        self.self_attention = nn.MultiheadAttention(hidden, heads, batch_first=True)
        self.ln_2 = nn.LayerNorm(hidden, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(hidden, mlp), nn.GELU(), nn.Linear(mlp, hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.ln_1(x)
        y, _ = self.self_attention(y, y, y, need_weights=False)
        x = x + y
        return x + self.mlp(self.ln_2(x))


class ViT(nn.Module):
    """torchvision's VisionTransformer (ViT-B/16's structure at a small width)."""

    def __init__(self, image: int = 32, patch: int = 16, hidden: int = 32, layers: int = 2,
                 heads: int = 4, mlp: int = 64, classes: int = 10) -> None:
        super().__init__()
        self.patch = patch
        self.conv_proj = nn.Conv2d(3, hidden, patch, patch)
        n = (image // patch) ** 2
        self.class_token = nn.Parameter(torch.zeros(1, 1, hidden))
        self.pos_embedding = nn.Parameter(torch.empty(1, n + 1, hidden).normal_(std=0.02))
        self.layers = nn.Sequential(*[_EncoderBlock(hidden, heads, mlp)
                                      for _ in range(layers)])
        self.ln = nn.LayerNorm(hidden, eps=1e-6)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv_proj(x).flatten(2).transpose(1, 2)
        cls = self.class_token.expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1) + self.pos_embedding
        x = self.ln(self.layers(x))
        return self.head(x[:, 0])


# ------------------------------------------------------------------- plain torch models


class TransformerEncoder(nn.Module):
    def __init__(self, vocab: int = 128, d: int = 32) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, 4, 64, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.encoder(self.embed(ids) * math.sqrt(self.embed.embedding_dim))


class Conv1dNet(nn.Module):
    def __init__(self, channels: int = 4, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv1d(channels, 16, 5, padding=2), nn.BatchNorm1d(16), nn.ReLU(),
            nn.MaxPool1d(2),
            nn.Conv1d(16, 32, 3, padding=1, dilation=1), nn.BatchNorm1d(32), nn.ReLU(),
            nn.Conv1d(32, 32, 3, padding=2, dilation=2, groups=4), nn.ReLU())
        self.fc = nn.Linear(32, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x).mean(dim=2))


def _signal(batch: int, seq: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(1)
    return (torch.randn(batch, 4, 64, generator=g),)


# ------------------------------------------------------------------------ transformers

_VOCAB = 128


class _FirstOutput(nn.Module):
    """A ``transformers`` model returning its first output (the last hidden state) as a
    tensor; its parameters keep the model's names under ``model.``."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if mask is None:
            return self.model(x, return_dict=False)[0]
        return self.model(x, attention_mask=mask, return_dict=False)[0]


def _bert() -> nn.Module:
    from transformers import BertConfig, BertModel

    cfg = BertConfig(vocab_size=_VOCAB, hidden_size=32, num_hidden_layers=2,
                     num_attention_heads=4, intermediate_size=64, max_position_embeddings=64)
    return _FirstOutput(BertModel(cfg, add_pooling_layer=False))


def _gpt2() -> nn.Module:
    from transformers import GPT2Config, GPT2Model

    cfg = GPT2Config(vocab_size=_VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                     use_cache=False)
    return _FirstOutput(GPT2Model(cfg))


def _llama() -> nn.Module:
    from transformers import LlamaConfig, LlamaModel

    cfg = LlamaConfig(vocab_size=_VOCAB, hidden_size=32, intermediate_size=64,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=64, use_cache=False)
    return _FirstOutput(LlamaModel(cfg))


def _t5_encoder() -> nn.Module:
    from transformers import T5Config, T5EncoderModel

    # Eager attention: torch 2.13's dynamo exporter fails to decompose T5's SDPA attention
    # ("Cannot view a tensor with shape [b, s, 4, 8] ... as a tensor with shape [b, s, 32]").
    cfg = T5Config(vocab_size=_VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                   num_heads=4, use_cache=False, attn_implementation="eager")
    return _FirstOutput(T5EncoderModel(cfg))


def _hf_vit() -> nn.Module:
    from transformers import ViTConfig, ViTModel

    cfg = ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2,
                    num_attention_heads=4, intermediate_size=64)
    return _FirstOutput(ViTModel(cfg, add_pooling_layer=False))


def _segformer() -> nn.Module:
    # Mix-FFN: a depthwise 3 x 3 of tokens transposed and reshaped to an image (a
    # channels-last view, distir.analysis.layout); reduced-key attention; four stages
    from transformers import SegformerConfig, SegformerForImageClassification

    cfg = SegformerConfig(num_channels=3, num_encoder_blocks=4, depths=[1, 1, 1, 1],
                          sr_ratios=[4, 2, 1, 1], hidden_sizes=[8, 16, 32, 32],
                          num_attention_heads=[1, 1, 2, 2], mlp_ratios=[2, 2, 2, 2],
                          decoder_hidden_size=32, num_labels=10)
    return _FirstOutput(SegformerForImageClassification(cfg))


def _focalnet() -> nn.Module:
    # focal modulation: a linear layer's tokens viewed as an image, split into queries,
    # context and gates, depthwise convolutions over the context; an adaptive pool (an
    # ``as_strided`` view in the dynamo export: a gather from the flattened batch)
    from transformers import FocalNetConfig, FocalNetForImageClassification

    return _FirstOutput(FocalNetForImageClassification(FocalNetConfig(
        image_size=32, patch_size=4, embed_dim=8, depths=[1, 1], hidden_sizes=[8, 16],
        num_labels=10)))


def _deberta_v3() -> nn.Module:
    # disentangled attention: content-to-position and position-to-content scores, products
    # with relative-position keys and queries tiled over batch x heads, gathered at each
    # pair's relative distance (log buckets)
    from transformers import DebertaV2Config, DebertaV2Model

    return _FirstOutput(DebertaV2Model(DebertaV2Config(
        vocab_size=_VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, relative_attention=True, pos_att_type=["p2c", "c2p"],
        position_biased_input=False, max_relative_positions=-1, position_buckets=8,
        norm_rel_ebd="layer_norm", share_att_key=True)))


def _beit() -> nn.Module:
    # a relative-position bias per layer, its table interpolated (``Resize``) to the
    # window of the image size each time, so its gradient goes back through the resize
    from transformers import BeitConfig, BeitForImageClassification

    return _FirstOutput(BeitForImageClassification(BeitConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
        image_size=32, patch_size=8, use_relative_position_bias=True, num_labels=10,
        attn_implementation="eager")))


def _convbert() -> nn.Module:
    # its attention mask made by TorchScript's advanced indexing: a gather from the
    # flattened [batch x seq] ones at indices computed from Range(batch) and Range(seq)
    from transformers import ConvBertConfig, ConvBertModel

    return _FirstOutput(ConvBertModel(ConvBertConfig(
        vocab_size=_VOCAB, hidden_size=32, embedding_size=32, num_hidden_layers=1,
        num_attention_heads=4, intermediate_size=64, max_position_embeddings=64)))


def _albert() -> nn.Module:
    # one layer's weights shared by all three layers: a pipeline stage holds every weight
    # its layers read, and a shared weight's gradient sums over the stages
    from transformers import AlbertConfig, AlbertModel

    return _FirstOutput(AlbertModel(AlbertConfig(
        vocab_size=_VOCAB, embedding_size=16, hidden_size=32, num_hidden_layers=3,
        num_attention_heads=4, intermediate_size=64, max_position_embeddings=64),
        add_pooling_layer=False))


def _mobilebert() -> nn.Module:
    # bottlenecks inside a wider residual stream, several feed-forward blocks a layer,
    # NoNorm (an elementwise scale and shift) in place of layer norms
    from transformers import MobileBertConfig, MobileBertModel

    return _FirstOutput(MobileBertModel(MobileBertConfig(
        vocab_size=_VOCAB, embedding_size=16, hidden_size=32, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=32, intra_bottleneck_size=16,
        true_hidden_size=16, num_feedforward_networks=2, max_position_embeddings=64),
        add_pooling_layer=False))


def _squeezebert() -> nn.Module:
    # its projections 1-D convolutions of kernel 1 in groups, over [batch, channels, seq]
    from transformers import SqueezeBertConfig, SqueezeBertModel

    return _FirstOutput(SqueezeBertModel(SqueezeBertConfig(
        vocab_size=_VOCAB, embedding_size=32, hidden_size=32, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=64, max_position_embeddings=64,
        q_groups=4, k_groups=4, v_groups=4, post_attention_groups=2,
        intermediate_groups=4, output_groups=4)))


def _swin() -> nn.Module:
    # shifted windows, patch merging by strided slices, an adaptive pool
    from transformers import SwinConfig, SwinForImageClassification

    return _FirstOutput(SwinForImageClassification(SwinConfig(
        image_size=32, patch_size=2, embed_dim=8, depths=[1, 1], num_heads=[1, 2],
        window_size=4, num_labels=10)))


def _mobilevitv2() -> nn.Module:
    # its transformer blocks unfold patches (a gather) and fold them back: nn.Fold, exported
    # as ONNX Col2Im
    from transformers import MobileViTV2Config, MobileViTV2ForImageClassification

    return _FirstOutput(MobileViTV2ForImageClassification(MobileViTV2Config(
        image_size=64, width_multiplier=0.5, num_labels=10)))


_B = {0: "batch"}
_BS = {0: "batch", 1: "seq"}

SPECS: tuple[Spec, ...] = (
    Spec("resnet18", "torchvision", _seeded(lambda: ResNet(_Basic, [2, 2, 2, 2])),
         _image(32), ("x",), (_B,)),
    Spec("resnet50", "torchvision", _seeded(lambda: ResNet(_Bottleneck, [3, 4, 6, 3])),
         _image(32), ("x",), (_B,)),
    Spec("mobilenet_v3_small", "torchvision", _seeded(MobileNetV3Small), _image(64), ("x",),
         (_B,)),
    Spec("efficientnet_b0", "torchvision", _seeded(EfficientNetB0), _image(64), ("x",),
         (_B,)),
    Spec("vit_b16", "torchvision", _seeded(ViT), _image(32), ("x",), (_B,)),
    Spec("bert", "transformers", _seeded(_bert), _tokens(_VOCAB, True),
         ("input_ids", "attention_mask"), (_BS, _BS)),
    Spec("gpt2", "transformers", _seeded(_gpt2), _tokens(_VOCAB, True),
         ("input_ids", "attention_mask"), (_BS, _BS)),
    Spec("llama", "transformers", _seeded(_llama), _tokens(_VOCAB, True),
         ("input_ids", "attention_mask"), (_BS, _BS)),
    Spec("t5_encoder", "transformers", _seeded(_t5_encoder), _tokens(_VOCAB, True),
         ("input_ids", "attention_mask"), (_BS, _BS)),
    Spec("vit", "transformers", _seeded(_hf_vit), _image(32), ("pixel_values",), (_B,)),
    Spec("segformer", "transformers", _seeded(_segformer), _image(64), ("pixel_values",),
         (_B,)),
    Spec("transformer_encoder", "torch", _seeded(TransformerEncoder), _tokens(_VOCAB, False),
         ("ids",), (_BS,)),
    Spec("conv1d", "torch", _seeded(Conv1dNet), _signal, ("x",), (_B,)),
)
"""Every zoo model, in the order of docs/zoo.md."""

FOCALNET = Spec("focalnet", "transformers", _seeded(_focalnet), _image(32), ("pixel_values",),
                (_B,))
SWIN = Spec("swin", "transformers", _seeded(_swin), _image(32), ("pixel_values",), (_B,))
DEBERTA_V3 = Spec("deberta_v3", "transformers", _seeded(_deberta_v3), _tokens(_VOCAB, False),
                  ("input_ids",), (_BS,))
BEIT = Spec("beit", "transformers", _seeded(_beit), _image(32), ("pixel_values",), (_B,))
CONVBERT = Spec("convbert", "transformers", _seeded(_convbert), _tokens(_VOCAB, False),
                ("input_ids",), (_BS,))
ALBERT = Spec("albert", "transformers", _seeded(_albert), _tokens(_VOCAB, False),
              ("input_ids",), (_BS,))
MOBILEBERT = Spec("mobilebert", "transformers", _seeded(_mobilebert), _tokens(_VOCAB, False),
                  ("input_ids",), (_BS,))
SQUEEZEBERT = Spec("squeezebert", "transformers", _seeded(_squeezebert),
                   _tokens(_VOCAB, False), ("input_ids",), (_BS,))
MOBILEVITV2 = Spec("mobilevitv2", "transformers", _seeded(_mobilevitv2), _image(64),
                   ("pixel_values",), (_B,))
"""FOCALNET, SWIN, DEBERTA_V3, BEIT, CONVBERT, ALBERT, MOBILEBERT, SQUEEZEBERT and
MOBILEVITV2 are not in the zoo's tables: ``tests/transforms/test_as_strided.py``,
``test_relative_attention.py``, ``test_shared_layers.py`` and ``test_fold.py`` train them
distributed."""

BY_NAME = {s.name: s for s in SPECS}
EXPORTERS = ("torchscript", "dynamo")
"""``torch.onnx.export(dynamo=False)`` and ``torch.onnx.export(dynamo=True)``."""
ALL_EXPORTERS = (*EXPORTERS, "import_torch")
"""Also ``distir.import_torch``'s own export (``distir.importers.pytorch.export_onnx``:
dynamo without the optimizer's folding of parameters), which docs/zoo.md lists too."""
