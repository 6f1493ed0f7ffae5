"""Export a model we did not write to ONNX, random weights, no download.

    python export.py bert OUT.onnx [--layers 12 --hidden 768 --heads 12] [--exporter torchscript]
    python export.py resnet50 OUT.onnx [--width 64 --image 224] [--exporter torchscript]

``bert``: Hugging Face's ``BertModel`` (no pooler) from a config, inputs ``input_ids`` and
``attention_mask`` of symbolic ``batch`` x ``seq``, output the last hidden state.
``resnet50``: torchvision's ResNet-50 layout (the zoo's ``tests.zoo.models.ResNet``,
Bottleneck x [3, 4, 6, 3]) at base width ``--width``, input ``x`` of symbolic ``batch`` x 3 x
image x image, output 1000 logits.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import warnings

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=["bert", "resnet50"])
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=30522)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--image", type=int, default=224)
    ap.add_argument("--exporter", choices=["torchscript", "dynamo"], default="torchscript")
    a = ap.parse_args()
    torch.manual_seed(0)
    if a.model == "bert":
        from transformers import BertConfig, BertModel

        cfg = BertConfig(vocab_size=a.vocab, hidden_size=a.hidden, num_hidden_layers=a.layers,
                         num_attention_heads=a.heads, intermediate_size=4 * a.hidden)
        bert = BertModel(cfg, add_pooling_layer=False).eval()

        class Hidden(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.m = bert

            def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
                return self.m(ids, attention_mask=mask, return_dict=False)[0]

        module: torch.nn.Module = Hidden()
        args: tuple[torch.Tensor, ...] = (torch.randint(0, a.vocab, (2, 8)),
                                          torch.ones(2, 8, dtype=torch.int64))
        names = ["input_ids", "attention_mask"]
        axes = [{0: "batch", 1: "seq"}, {0: "batch", 1: "seq"}]
        what = f"BertModel {a.layers} x {a.hidden}, {a.heads} heads"
    else:
        import sys
        from pathlib import Path

        sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the project's root
        from tests.zoo.models import ResNet, _Bottleneck

        module = ResNet(_Bottleneck, [3, 4, 6, 3], base=a.width, classes=1000).eval()
        args = (torch.randn(2, 3, a.image, a.image),)
        names = ["x"]
        axes = [{0: "batch"}]
        what = f"ResNet-50 layout, base width {a.width}, {a.image} x {a.image} images"
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        if a.exporter == "torchscript":
            torch.onnx.export(module, args, a.out, dynamo=False, input_names=names,
                              output_names=["y"], dynamic_axes=dict(zip(names, axes)))
        else:
            torch.onnx.export(module, args, dynamo=True, input_names=names, output_names=["y"],
                              dynamic_shapes=tuple(axes)).save(a.out)
    print(f"{a.out}: {what}, exported with {a.exporter}")


if __name__ == "__main__":
    main()
