"""Export two models to ONNX that no cost-model work looked at, random weights, no
download:

    python export.py sewd OUT.onnx          # HF SEWDModel (defaults), 4 s of 16 kHz audio
    python export.py efficientnet OUT.onnx  # HF EfficientNetForImageClassification, B0
    python export.py wav2vec2 OUT.onnx      # HF Wav2Vec2Model (defaults: wav2vec 2.0 base)
    python export.py wavlm OUT.onnx         # HF WavLMModel (defaults: WavLM base)

``sewd``: Hugging Face's default SEW-D config (a speech encoder: seven 1-D convolutions of
512 channels with group norm and GELU over raw audio, frames squeezed 2x, then 12 layers of
768 with DeBERTa's disentangled attention over 256 relative-position buckets, the scores
at each pair's relative distance gathered by ``torch.gather`` with a position index
expanded over batch and heads), 64,000 samples per clip; dynamo; its first output (the
hidden states). ``efficientnet``: the default EfficientNet config (B0: inverted residual
blocks of depthwise convolutions, squeeze-and-excitation, SiLU, batch norms), 224 x 224
images, 1000 classes; dynamo. ``wav2vec2``: the default Wav2Vec2 config (wav2vec 2.0
base: seven 1-D convolutions of 512 channels with a group norm over raw audio, a
positional convolution of 128 in 16 groups, 12 layers of 768), 64,000 samples; dynamo.
``wavlm``: the default WavLM config (the same feature extractor and positional
convolution, 12 layers of 768 with gated relative-position biases over 320 buckets),
64,000 samples; dynamo. Both return the hidden states.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the project's root

from tests.zoo.models import _FirstOutput, _image  # noqa: E402

SAMPLES = 64000


def _audio(samples: int) -> Callable[[int, int], tuple[torch.Tensor, ...]]:
    def inputs(batch: int, seq: int) -> tuple[torch.Tensor, ...]:
        g = torch.Generator().manual_seed(1)
        return (torch.randn(batch, samples, generator=g),)
    return inputs


def _sewd() -> torch.nn.Module:
    from transformers import SEWDConfig, SEWDModel

    return _FirstOutput(SEWDModel(SEWDConfig()))


def _efficientnet() -> torch.nn.Module:
    from transformers import EfficientNetConfig, EfficientNetForImageClassification

    return _FirstOutput(EfficientNetForImageClassification(EfficientNetConfig(num_labels=1000)))


def _wav2vec2() -> torch.nn.Module:
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    return _FirstOutput(Wav2Vec2Model(Wav2Vec2Config()))


def _wavlm() -> torch.nn.Module:
    from transformers import WavLMConfig, WavLMModel

    return _FirstOutput(WavLMModel(WavLMConfig()))


MODELS = {  # name: (build, inputs, input name, symbolic axes, exporter, what)
    "sewd": (_sewd, _audio(SAMPLES), "input_values", {0: "batch"}, "dynamo",
             f"HF SEW-D (default config), {SAMPLES} samples of audio"),
    "efficientnet": (_efficientnet, _image(224), "pixel_values", {0: "batch"}, "dynamo",
                     "HF EfficientNet-B0, 224 x 224 images"),
    "wav2vec2": (_wav2vec2, _audio(SAMPLES), "input_values", {0: "batch"}, "dynamo",
                 f"HF wav2vec 2.0 base (default config), {SAMPLES} samples of audio"),
    "wavlm": (_wavlm, _audio(SAMPLES), "input_values", {0: "batch"}, "dynamo",
              f"HF WavLM base (default config), {SAMPLES} samples of audio"),
}


if __name__ == "__main__":
    _spec = importlib.util.spec_from_file_location(
        "zoo_sealed3_export", Path(__file__).resolve().parent.parent / "zoo_sealed3" / "export.py")
    assert _spec is not None and _spec.loader is not None
    sealed3 = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sealed3)
    sealed3.main(MODELS)
