"""Export models to ONNX that no cost-model work has looked at, random weights, no
download (Hugging Face configs at published sizes):

    python export.py NAME OUT.onnx     # NAME: one of MODELS below

Token models take ``input_ids`` of symbolic batch and sequence and return their last
hidden state; image and audio models take a symbolic batch and return their logits or
hidden state (each model's line in ``MODELS`` says which). ``tests/zoo/export.py`` does
the export (batch 2, 8 tokens as the example).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the project's root

from tests.zoo.models import _FirstOutput, _image, _tokens  # noqa: E402

VOCAB = 32000


def _eager(cfg):  # type: ignore[no-untyped-def]
    cfg._attn_implementation = "eager"
    if hasattr(cfg, "use_cache"):
        cfg.use_cache = False
    return cfg


def _distilbert() -> torch.nn.Module:
    from transformers import DistilBertConfig, DistilBertModel

    return _FirstOutput(DistilBertModel(_eager(DistilBertConfig(vocab_size=VOCAB))))


def _electra() -> torch.nn.Module:
    from transformers import ElectraConfig, ElectraModel

    # ELECTRA-small's discriminator: embeddings of 128 projected to 256, 4 heads
    return _FirstOutput(ElectraModel(_eager(ElectraConfig(vocab_size=VOCAB))))


def _roformer() -> torch.nn.Module:
    from transformers import RoFormerConfig, RoFormerModel

    return _FirstOutput(RoFormerModel(_eager(RoFormerConfig(vocab_size=VOCAB))))


def _mpnet() -> torch.nn.Module:
    from transformers import MPNetConfig, MPNetModel

    return _FirstOutput(MPNetModel(_eager(MPNetConfig(vocab_size=VOCAB))))


def _bloom() -> torch.nn.Module:
    from transformers import BloomConfig, BloomModel

    # BLOOM-560m's width and heads, half its depth: ALiBi biases, no position embedding
    return _FirstOutput(BloomModel(_eager(BloomConfig(
        vocab_size=VOCAB, hidden_size=1024, n_layer=12, n_head=16))))


def _phi() -> torch.nn.Module:
    from transformers import PhiConfig, PhiModel

    # Phi's block (attention and MLP in parallel off one layer norm, rotary embedding on
    # half of each head, GELU), at 1024 x 12
    return _FirstOutput(PhiModel(_eager(PhiConfig(
        vocab_size=VOCAB, hidden_size=1024, intermediate_size=4096, num_hidden_layers=12,
        num_attention_heads=16, partial_rotary_factor=0.5))))


def _gemma() -> torch.nn.Module:
    from transformers import GemmaConfig, GemmaModel

    # Gemma's block (RMS norms, GeGLU MLP, one key-value head, heads of 256), at 1024 x 8
    return _FirstOutput(GemmaModel(_eager(GemmaConfig(
        vocab_size=VOCAB, hidden_size=1024, intermediate_size=4096, num_hidden_layers=8,
        num_attention_heads=8, num_key_value_heads=1, head_dim=256))))


def _falcon() -> torch.nn.Module:
    from transformers import FalconConfig, FalconModel

    # Falcon's block (parallel attention and MLP, multi-query attention, rotary), 1024 x 12
    return _FirstOutput(FalconModel(_eager(FalconConfig(
        vocab_size=VOCAB, hidden_size=1024, num_hidden_layers=12, num_attention_heads=16,
        multi_query=True, parallel_attn=True, new_decoder_architecture=False))))


def _gpt_neo() -> torch.nn.Module:
    from transformers import GPTNeoConfig, GPTNeoModel

    # GPT-Neo-125M's sizes: global and local (window 256) attention layers alternating
    return _FirstOutput(GPTNeoModel(_eager(GPTNeoConfig(
        vocab_size=VOCAB, hidden_size=768, num_layers=12, num_heads=12,
        attention_types=[[["global", "local"], 6]], window_size=256))))


def _modernbert() -> torch.nn.Module:
    from transformers import ModernBertConfig, ModernBertModel

    # ModernBERT-base's sizes: 22 layers of 768, GeGLU, rotary, local attention (128)
    # every layer but each third
    return _FirstOutput(ModernBertModel(_eager(ModernBertConfig(
        vocab_size=VOCAB, pad_token_id=0, eos_token_id=1, bos_token_id=2, cls_token_id=2,
        sep_token_id=1))))


def _stablelm() -> torch.nn.Module:
    from transformers import StableLmConfig, StableLmModel

    # StableLM's block (layer norms, SwiGLU, rotary on a quarter of each head), 1024 x 12
    return _FirstOutput(StableLmModel(_eager(StableLmConfig(
        vocab_size=VOCAB, hidden_size=1024, intermediate_size=2816, num_hidden_layers=12,
        num_attention_heads=16, num_key_value_heads=16))))


def _gpt_neox() -> torch.nn.Module:
    from transformers import GPTNeoXConfig, GPTNeoXModel

    # Pythia-160M's sizes: fused q, k, v split by a view, rotary on a quarter of each head,
    # attention and MLP in parallel
    return _FirstOutput(GPTNeoXModel(_eager(GPTNeoXConfig(
        vocab_size=VOCAB, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
        intermediate_size=3072))))


def _qwen2() -> torch.nn.Module:
    from transformers import Qwen2Config, Qwen2Model

    # Qwen2-0.5B's width and heads (14 query, 2 key-value heads of 64; q, k, v biases),
    # half its depth
    return _FirstOutput(Qwen2Model(_eager(Qwen2Config(
        vocab_size=VOCAB, hidden_size=896, intermediate_size=4864, num_hidden_layers=12,
        num_attention_heads=14, num_key_value_heads=2))))


def _llama() -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaModel

    # Llama's block (RMS norms, SwiGLU, rotary, 4 key-value heads for 16), at 1024 x 12
    return _FirstOutput(LlamaModel(_eager(LlamaConfig(
        vocab_size=VOCAB, hidden_size=1024, intermediate_size=2816, num_hidden_layers=12,
        num_attention_heads=16, num_key_value_heads=4))))


def _olmo() -> torch.nn.Module:
    from transformers import OlmoConfig, OlmoModel

    # OLMo's block (layer norms without weights, SwiGLU, rotary), at 1024 x 12
    return _FirstOutput(OlmoModel(_eager(OlmoConfig(
        vocab_size=VOCAB, hidden_size=1024, intermediate_size=2816, num_hidden_layers=12,
        num_attention_heads=16))))


def _gptj() -> torch.nn.Module:
    from transformers import GPTJConfig, GPTJModel

    # GPT-J's block (parallel attention and MLP, rotary on 32 of each head's 64, its
    # pairs interleaved), at 1024 x 12
    return _FirstOutput(GPTJModel(_eager(GPTJConfig(
        vocab_size=VOCAB, n_embd=1024, n_layer=12, n_head=16, rotary_dim=32))))


def _ast() -> torch.nn.Module:
    from transformers import ASTConfig, ASTForAudioClassification

    # the default AST: 128 mel bins x 1024 frames cut into 16 x 16 patches overlapping
    # at strides of 10, 12 layers of 768, 527 classes
    return _FirstOutput(ASTForAudioClassification(_eager(ASTConfig(num_labels=527))))


def _spectrogram(batch: int, seq: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(1)
    return (torch.randn(batch, 1024, 128, generator=g),)


def _whisper() -> torch.nn.Module:
    from transformers import WhisperConfig, WhisperModel

    # Whisper-base's encoder: two 1-D convolutions over 80 mel bins x 3000 frames, 6 layers
    # of 512, 8 heads
    cfg = _eager(WhisperConfig(d_model=512, encoder_layers=6, encoder_attention_heads=8,
                               encoder_ffn_dim=2048, num_mel_bins=80,
                               decoder_attention_heads=8, decoder_ffn_dim=2048, decoder_layers=1))
    return _FirstOutput(WhisperModel(cfg).get_encoder())


def _mel(batch: int, seq: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(1)
    return (torch.randn(batch, 80, 3000, generator=g),)


def _mobilevitv2() -> torch.nn.Module:
    from transformers import MobileViTV2Config, MobileViTV2ForImageClassification

    # MobileViTV2 1.0: separable self-attention, 256 x 256 images
    return _FirstOutput(MobileViTV2ForImageClassification(MobileViTV2Config(num_labels=1000)))


def _swiftformer() -> torch.nn.Module:
    from transformers import SwiftFormerConfig, SwiftFormerForImageClassification

    # SwiftFormer-XS: efficient additive attention, depthwise convolutions, batch norms
    return _FirstOutput(SwiftFormerForImageClassification(SwiftFormerConfig(num_labels=1000)))


def _pvt() -> torch.nn.Module:
    from transformers import PvtConfig, PvtForImageClassification

    # PVT-v1 tiny: spatial-reduction attention (strided convolutions of keys and values)
    return _FirstOutput(PvtForImageClassification(_eager(PvtConfig(num_labels=1000))))


def _clip_vision() -> torch.nn.Module:
    from transformers import CLIPVisionConfig, CLIPVisionModel

    # CLIP's ViT-B/32 image tower: pre-layer-norm, quick GELU, 32 x 32 patches
    return _FirstOutput(CLIPVisionModel(_eager(CLIPVisionConfig())))


def _textnet() -> torch.nn.Module:
    from transformers import TextNetConfig, TextNetForImageClassification

    # TextNet-T: re-parameterizable convolutions of 3 x 3, 1 x 3 and 3 x 1 kernels
    return _FirstOutput(TextNetForImageClassification(TextNetConfig(num_labels=1000)))


def _hgnetv2() -> torch.nn.Module:
    from transformers import HGNetV2Config, HGNetV2ForImageClassification

    # HGNet-V2 B0: light convolution blocks, learnable affine blocks, ESE attention
    return _FirstOutput(HGNetV2ForImageClassification(HGNetV2Config(num_labels=1000)))


_BS = {0: "batch", 1: "seq"}
_B = {0: "batch"}

MODELS: dict[str, tuple[Callable[[], torch.nn.Module], Callable[[int, int], tuple],
                        str, dict[int, str], str, str]] = {
    # name: (build, inputs, input name, symbolic axes, exporter, what)
    "distilbert": (_distilbert, _tokens(VOCAB, False), "input_ids", _BS, "torchscript",
                   "HF DistilBERT-base (6 x 768)"),
    "electra": (_electra, _tokens(VOCAB, False), "input_ids", _BS, "torchscript",
                "HF ELECTRA-small discriminator (12 x 256, embeddings of 128)"),
    "roformer": (_roformer, _tokens(VOCAB, False), "input_ids", _BS, "dynamo",
                 "HF RoFormer-base (12 x 768, rotary)"),
    "mpnet": (_mpnet, _tokens(VOCAB, False), "input_ids", _BS, "torchscript",
              "HF MPNet-base (12 x 768, relative-position buckets)"),
    "bloom": (_bloom, _tokens(VOCAB, False), "input_ids", _BS, "dynamo",
              "HF BLOOM at 560m's width, 12 layers (ALiBi)"),
    "phi": (_phi, _tokens(VOCAB, False), "input_ids", _BS, "dynamo",
            "HF Phi block at 1024 x 12 (parallel, partial rotary)"),
    "gemma": (_gemma, _tokens(VOCAB, False), "input_ids", _BS, "dynamo",
              "HF Gemma block at 1024 x 8 (one key-value head, heads of 256)"),
    "falcon": (_falcon, _tokens(VOCAB, False), "input_ids", _BS, "dynamo",
               "HF Falcon block at 1024 x 12 (multi-query, parallel)"),
    "gpt_neo": (_gpt_neo, _tokens(VOCAB, False), "input_ids", _BS, "dynamo",
                "HF GPT-Neo at 125M's sizes (local attention every other layer)"),
    "modernbert": (_modernbert, _tokens(VOCAB, False), "input_ids", _BS, "dynamo",
                   "HF ModernBERT-base (22 x 768)"),
    "stablelm": (_stablelm, _tokens(VOCAB, False), "input_ids", _BS, "dynamo",
                 "HF StableLM block at 1024 x 12 (rotary on a quarter)"),
    "gpt_neox": (_gpt_neox, _tokens(VOCAB, False), "input_ids", _BS, "dynamo",
                 "HF GPT-NeoX at Pythia-160M's sizes (fused q, k, v; parallel)"),
    "qwen2": (_qwen2, _tokens(VOCAB, False), "input_ids", _BS, "dynamo",
              "HF Qwen2 at 0.5B's width, 12 layers (2 key-value heads of 14)"),
    "llama": (_llama, _tokens(VOCAB, False), "input_ids", _BS, "dynamo",
              "HF Llama block at 1024 x 12 (4 key-value heads of 16)"),
    "olmo": (_olmo, _tokens(VOCAB, False), "input_ids", _BS, "dynamo",
             "HF OLMo block at 1024 x 12 (layer norms without weights)"),
    "gptj": (_gptj, _tokens(VOCAB, False), "input_ids", _BS, "dynamo",
             "HF GPT-J block at 1024 x 12 (parallel, interleaved partial rotary)"),
    "ast": (_ast, _spectrogram, "input_values", _B, "dynamo",
            "HF AST (12 x 768 over 1212 overlapping patches of a spectrogram)"),
    "whisper": (_whisper, _mel, "input_features", _B, "dynamo",
                "HF Whisper-base's encoder (6 x 512 over 1500 frames)"),
    "mobilevitv2": (_mobilevitv2, _image(256), "pixel_values", _B, "dynamo",
                    "HF MobileViTV2 1.0, 256 x 256 images"),
    "swiftformer": (_swiftformer, _image(224), "pixel_values", _B, "dynamo",
                    "HF SwiftFormer-XS, 224 x 224 images"),
    "pvt": (_pvt, _image(224), "pixel_values", _B, "dynamo",
            "HF PVT-v1 tiny, 224 x 224 images"),
    "clip_vision": (_clip_vision, _image(224), "pixel_values", _B, "dynamo",
                    "HF CLIP ViT-B/32 image tower, 224 x 224 images"),
    "textnet": (_textnet, _image(224), "pixel_values", _B, "dynamo",
                "HF TextNet-T, 224 x 224 images"),
    "hgnetv2": (_hgnetv2, _image(224), "pixel_values", _B, "dynamo",
                "HF HGNet-V2 B0, 224 x 224 images"),
}


if __name__ == "__main__":
    _spec = importlib.util.spec_from_file_location(
        "zoo_sealed3_export", Path(__file__).resolve().parent.parent / "zoo_sealed3" / "export.py")
    assert _spec is not None and _spec.loader is not None
    sealed3 = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sealed3)
    sealed3.main(MODELS)
