"""Sixteen more ``transformers`` architectures at small configurations (random weights),
each exported with both torch exporters through the zoo's ``export``, imported as a
training step (mse, Adam) and searched over every configuration of at most 2 devices
(``grid-search --fewer-devices --max-microbatches 2``, simulated): one line per model and
exporter, with the search's count of configurations that fit, were refused or failed, and
the first refusal's reason.

    python grid_search/results/zoo_sweep/sweep.py [NAME ...] > sweep.txt   # ~5 min, 2 cores

The exports and searches go to a temporary folder.
"""

from __future__ import annotations

import contextlib
import csv
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the project's root

from tests.zoo.export import export  # noqa: E402
from tests.zoo.models import Spec, _FirstOutput, _image, _tokens  # noqa: E402

TOKENS = ("input_ids", {0: "batch", 1: "seq"})
IMAGE = ("pixel_values", {0: "batch"})
SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
             intermediate_size=128)


def _models() -> dict[str, tuple[Callable[[], torch.nn.Module], Any, tuple]]:
    """name: (build, inputs, (input name, symbolic axes))."""
    import transformers as T

    tok = _tokens(128, False)
    img = _image(32)

    def hf(model: Any, config: Any) -> Callable[[], torch.nn.Module]:
        return lambda: _FirstOutput(model(config))

    return {
        "distilbert": (hf(T.DistilBertModel, T.DistilBertConfig(
            vocab_size=128, dim=64, n_layers=2, n_heads=4, hidden_dim=128)), tok, TOKENS),
        "roberta": (hf(T.RobertaModel, T.RobertaConfig(
            vocab_size=128, max_position_embeddings=64, **SMALL)), tok, TOKENS),
        "albert": (hf(T.AlbertModel, T.AlbertConfig(
            vocab_size=128, embedding_size=32, **SMALL)), tok, TOKENS),
        "deberta": (hf(T.DebertaV2Model, T.DebertaV2Config(
            vocab_size=128, max_position_embeddings=64, **SMALL)), tok, TOKENS),
        "electra": (hf(T.ElectraModel, T.ElectraConfig(
            vocab_size=128, embedding_size=32, **SMALL)), tok, TOKENS),
        "qwen2": (hf(T.Qwen2Model, T.Qwen2Config(
            vocab_size=128, num_key_value_heads=2, use_cache=False, **SMALL)), tok, TOKENS),
        "mistral": (hf(T.MistralModel, T.MistralConfig(
            vocab_size=128, num_key_value_heads=2, use_cache=False, **SMALL)), tok, TOKENS),
        "phi": (hf(T.PhiModel, T.PhiConfig(vocab_size=128, use_cache=False, **SMALL)), tok,
                TOKENS),
        "falcon": (hf(T.FalconModel, T.FalconConfig(
            vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
            use_cache=False)), tok, TOKENS),
        "gptj": (hf(T.GPTJModel, T.GPTJConfig(
            vocab_size=128, n_embd=64, n_layer=2, n_head=4, rotary_dim=8, n_positions=64,
            use_cache=False)), tok, TOKENS),
        "bloom": (hf(T.BloomModel, T.BloomConfig(
            vocab_size=128, hidden_size=64, n_layer=2, n_head=4, use_cache=False)), tok,
            TOKENS),
        "swin": (hf(T.SwinModel, T.SwinConfig(
            image_size=32, patch_size=2, embed_dim=16, depths=[1, 1], num_heads=[2, 2],
            window_size=4)), img, IMAGE),
        "segformer": (hf(T.SegformerModel, T.SegformerConfig(
            num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32],
            num_attention_heads=[1, 2], patch_sizes=[7, 3], strides=[4, 2],
            mlp_ratios=[2, 2])), img, IMAGE),
        "regnet": (hf(T.RegNetModel, T.RegNetConfig(
            embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], groups_width=8)), img,
            IMAGE),
        "clip_vision": (hf(T.CLIPVisionModel, T.CLIPVisionConfig(
            image_size=32, patch_size=8, **SMALL)), img, IMAGE),
        "whisper_enc": (lambda: _FirstOutput(T.WhisperModel(T.WhisperConfig(
            d_model=64, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
            decoder_attention_heads=4, num_mel_bins=16, max_source_positions=16)).encoder),
            lambda b, s: (torch.randn(b, 16, 32),), ("input_features", {0: "batch"})),
    }


@contextlib.contextmanager
def _quiet_fd1() -> Iterator[None]:
    """Standard output closed at the descriptor: the TorchScript exporter prints the whole
    graph there (from C++) when it fails."""
    sys.stdout.flush()
    saved = os.dup(1)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 1)
        try:
            yield
        finally:
            os.dup2(saved, 1)
            os.close(saved)


def main() -> None:
    models = _models()
    out = Path(tempfile.mkdtemp(prefix="zoo_sweep_"))
    for name in sys.argv[1:] or list(models):
        build, inputs, (iname, axes) = models[name]

        def seeded(b: Callable[[], torch.nn.Module] = build) -> torch.nn.Module:
            torch.manual_seed(0)
            return b().eval()

        for exporter in ("torchscript", "dynamo"):
            path = out / f"{name}_{exporter}.onnx"
            t0 = time.time()
            try:
                with _quiet_fd1():
                    export(Spec(name, "sweep", seeded, inputs, (iname,), (axes,)), exporter,
                           str(path))
            except Exception as e:  # noqa: BLE001 - the exporter's failure, reported
                print(f"{name} {exporter}: export failed: {type(e).__name__}: "
                      f"{str(e).splitlines()[0][:60]}", flush=True)
                continue
            dims = ["--dim", "batch=4"] + (["--dim", "seq=16"] if 1 in axes else [])
            csv_path = out / f"{name}_{exporter}.csv"
            r = subprocess.run(
                [sys.executable, "-m", "distir", "grid-search", "--model", str(path), *dims,
                 "--train", "--loss", "mse", "--optimizer", "adam", "--devices", "2",
                 "--fewer-devices", "--max-microbatches", "2", "--workers", "1",
                 "-o", str(csv_path), "--plot", str(out / f"{name}.png")],
                capture_output=True, text=True, cwd=out, timeout=600)
            rows = list(csv.DictReader(open(csv_path))) if csv_path.exists() else []
            status = {s: sum(x["status"] == s for x in rows) for s in ("ok", "refused", "error")}
            why = next((x.get("reason", "")[:150] for x in rows if x["status"] != "ok"), "")
            print(f"{name} {exporter}: rc {r.returncode}, {time.time() - t0:.0f} s, "
                  f"{len(rows)} configurations: {status['ok']} ok, {status['refused']} "
                  f"refused, {status['error']} failed{'; first: ' + why if why else ''}",
                  flush=True)


if __name__ == "__main__":
    main()
