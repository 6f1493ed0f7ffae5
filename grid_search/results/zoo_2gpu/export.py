"""Export the held-out models of this folder to ONNX, random weights, no download.

    python export.py llama OUT.onnx [--layers 8 --hidden 1024 --heads 16 --kv-heads 4]
    python export.py vit OUT.onnx [--layers 12 --hidden 768 --heads 12 --image 224]

``llama``: Hugging Face's ``LlamaForCausalLM`` from a config (grouped-query attention,
SwiGLU, RMSNorm, rotary positions), input ``input_ids`` of symbolic ``batch`` x ``seq``,
output the logits; dynamo export. ``vit``: Hugging Face's ``ViTModel`` (no pooler), input
``pixel_values`` of symbolic ``batch`` x 3 x image x image, output the last hidden state;
torchscript export.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import warnings

import torch


class _First(torch.nn.Module):
    """A ``transformers`` model returning its first output as a tensor."""

    def __init__(self, m: torch.nn.Module) -> None:
        super().__init__()
        self.m = m

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.m(x, return_dict=False)[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=["llama", "vit"])
    ap.add_argument("out")
    ap.add_argument("--layers", type=int)
    ap.add_argument("--hidden", type=int)
    ap.add_argument("--heads", type=int)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--image", type=int, default=224)
    ap.add_argument("--exporter", choices=["torchscript", "dynamo"])
    a = ap.parse_args()
    torch.manual_seed(0)
    if a.model == "llama":
        from transformers import LlamaConfig, LlamaForCausalLM

        layers, hidden, heads = a.layers or 8, a.hidden or 1024, a.heads or 16
        cfg = LlamaConfig(vocab_size=a.vocab, hidden_size=hidden,
                          intermediate_size=(8 * hidden // 3 + 255) // 256 * 256,
                          num_hidden_layers=layers, num_attention_heads=heads,
                          num_key_value_heads=a.kv_heads, max_position_embeddings=2048,
                          use_cache=False)
        module = _First(LlamaForCausalLM(cfg).eval())
        args: tuple[torch.Tensor, ...] = (torch.randint(0, a.vocab, (2, 8)),)
        names, axes = ["input_ids"], [{0: "batch", 1: "seq"}]
        exporter = a.exporter or "dynamo"
        what = (f"LlamaForCausalLM {layers} x {hidden}, {heads} heads ({a.kv_heads} key-value),"
                f" MLP {cfg.intermediate_size}, vocabulary {a.vocab}")
    else:
        from transformers import ViTConfig, ViTModel

        layers, hidden, heads = a.layers or 12, a.hidden or 768, a.heads or 12
        cfg = ViTConfig(image_size=a.image, patch_size=16, hidden_size=hidden,
                        num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=4 * hidden)
        module = _First(ViTModel(cfg, add_pooling_layer=False).eval())
        args = (torch.randn(2, 3, a.image, a.image),)
        names, axes = ["pixel_values"], [{0: "batch"}]
        exporter = a.exporter or "torchscript"
        what = f"ViTModel {layers} x {hidden}, {heads} heads, {a.image} x {a.image} images"
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            torch.onnx.export(module, args, a.out, dynamo=False, input_names=names,
                              output_names=["y"], dynamic_axes=dict(zip(names, axes)))
        else:
            torch.onnx.export(module, args, dynamo=True, input_names=names, output_names=["y"],
                              dynamic_shapes=tuple(axes)).save(a.out)
    print(f"{a.out}: {what}, exported with {exporter}")


if __name__ == "__main__":
    main()
