"""Export a model to ONNX that no cost-model work looked at, random weights, no download:

    python export.py conformer OUT.onnx   # HF Wav2Vec2ConformerModel (defaults)

``conformer``: Hugging Face's default wav2vec 2.0-Conformer config (the wav2vec 2.0 feature
extractor: seven 1-D convolutions of 512 channels over raw audio; then 12 conformer
layers of 768: two half-step feed-forwards around relative-position self-attention and a
convolution module, which transposes the frames to ``[N, 768, T]`` for a pointwise
convolution to 1,536 channels, a GLU, a depthwise convolution of kernel 31, a batch norm,
SiLU and a pointwise convolution back), 64,000 samples of audio; eager attention (torch's
dynamo exporter fails to decompose its SDPA attention: "Cannot view a tensor with shape
[s77, 199, 12, 64] ... as [s77, 199, 768]"); dynamo; the hidden states.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the project's root

from tests.zoo.models import _FirstOutput  # noqa: E402

SAMPLES = 64000


def _audio(batch: int, seq: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(1)
    return (torch.randn(batch, SAMPLES, generator=g),)


def _conformer() -> torch.nn.Module:
    from transformers import Wav2Vec2ConformerConfig, Wav2Vec2ConformerModel

    return _FirstOutput(Wav2Vec2ConformerModel(
        Wav2Vec2ConformerConfig(attn_implementation="eager")))


MODELS = {  # name: (build, inputs, input name, symbolic axes, exporter, what)
    "conformer": (_conformer, _audio, "input_values", {0: "batch"}, "dynamo",
                  f"HF wav2vec 2.0-Conformer (default config), {SAMPLES} samples of audio"),
}


if __name__ == "__main__":
    _spec = importlib.util.spec_from_file_location(
        "zoo_sealed3_export", Path(__file__).resolve().parent.parent / "zoo_sealed3" / "export.py")
    assert _spec is not None and _spec.loader is not None
    sealed3 = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sealed3)
    sealed3.main(MODELS)
