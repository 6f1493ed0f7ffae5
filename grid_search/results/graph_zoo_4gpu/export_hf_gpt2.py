"""Export Hugging Face's GPT2LMHeadModel (random weights, from a config: no download) to ONNX
with input ``input_ids`` of symbolic ``batch`` x ``seq`` and output ``logits``.

    python export_hf_gpt2.py OUT.onnx [--layers 12 --hidden 768 --heads 12 --vocab 50257]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import warnings

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--positions", type=int, default=1024)
    ap.add_argument("--exporter", choices=["torchscript", "dynamo"], default="dynamo")
    a = ap.parse_args()
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=a.vocab, n_embd=a.hidden, n_layer=a.layers, n_head=a.heads,
                     n_positions=a.positions, use_cache=False)
    model = GPT2LMHeadModel(cfg).eval()

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            return self.m(input_ids=input_ids).logits

    ids = torch.randint(0, a.vocab, (2, 8))
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        if a.exporter == "torchscript":
            torch.onnx.export(Logits(), (ids,), a.out, dynamo=False, input_names=["input_ids"],
                              output_names=["logits"],
                              dynamic_axes={"input_ids": {0: "batch", 1: "seq"}})
        else:
            prog = torch.onnx.export(Logits(), (ids,), dynamo=True, input_names=["input_ids"],
                                     output_names=["logits"],
                                     dynamic_shapes=({0: "batch", 1: "seq"},))
            prog.save(a.out)
    print(f"{a.out}: GPT2LMHeadModel {a.layers} x {a.hidden}, {a.heads} heads, vocabulary "
          f"{a.vocab}, exported with {a.exporter}")


if __name__ == "__main__":
    main()
