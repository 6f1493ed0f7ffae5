"""``distir import MODEL.onnx [-o OUT.dir] [--dim NAME=N ...]``: ONNX to DistIR text;
``distir import --torch PACKAGE.MODULE:FACTORY --example SHAPE ...``: a PyTorch module, through
``torch.onnx.export(dynamo=True)`` (``distir.importers.pytorch``), to the same.

Weights never go into the text: with ``-o OUT.dir`` the initializer values are written
beside it as ``OUT.npz`` (``distir.ir.text.weights_path``), which ``distir.load`` and every
command that reads ``OUT.dir`` pick up; without ``-o`` only the text is printed, and standard
error says that the weights were not written.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "import", help="convert an ONNX model or a PyTorch module to DistIR text",
        description="Convert an ONNX model (or, with --torch, a PyTorch module exported "
        "through torch.onnx.export(dynamo=True)) to DistIR text. Models of other opsets are "
        "converted to opset 21 first. Initializer values (weights) are written to OUT.npz "
        "beside OUT.dir, never into the text.")
    p.add_argument("model", nargs="?",
                   help="an .onnx file (external data files beside it are read)")
    p.add_argument("--torch", metavar="PACKAGE.MODULE:FACTORY",
                   help="import the torch.nn.Module that FACTORY() returns instead of a file "
                   "(the module is imported from the current directory too)")
    p.add_argument("--example", action="append", default=[], metavar="SHAPE",
                   help="with --torch: one per forward() argument, [DTYPE:]D,D,... where D is "
                   "a size or NAME=SIZE for a symbolic axis, e.g. --example batch=2,3,32,32 "
                   "or --example int64:batch=2,seq=8 (floats are random, integers ones)")
    p.add_argument("-o", "--output", metavar="OUT.dir",
                   help="write the text here and the weights to OUT.npz beside it "
                   "(default: print the text; weights are not written)")
    p.add_argument("--dim", action="append", default=[], metavar="NAME=N",
                   help="bind a symbolic input dimension, e.g. --dim batch=8 (repeatable)")
    p.add_argument("--device", type=int, default=0, metavar="D",
                   help="the device of every parameter and constant (default 0)")
    from distir.cli import _train

    _train.add_arguments(p)  # --train --loss --optimizer --lr: write the training step
    p.set_defaults(func=run_import)


def parse_dims(items: list[str]) -> dict[str, int]:
    """``["batch=8", "seq=128"]`` as ``{"batch": 8, "seq": 128}``."""
    from distir.errors import ConfigError

    dims: dict[str, int] = {}
    for item in items:
        name, eq, value = item.partition("=")
        name = name.strip()
        try:
            n = int(value)
        except ValueError:
            n = -1
        if not eq or not name or n <= 0:
            raise ConfigError(f"--dim {item}: expected NAME=N with N a positive integer, "
                              "e.g. --dim batch=8")
        if name in dims and dims[name] != n:
            raise ConfigError(f"--dim {name} is given twice ({dims[name]} and {n})")
        dims[name] = n
    return dims


def _write_npz(path: str, arrays: dict[str, Any]) -> None:
    from distir.ir.text import write_weights

    write_weights(path, arrays)


def _header(args: argparse.Namespace, n_weights: int, weights: str | None) -> str:
    src = f"torch {args.torch}" if args.torch else os.path.basename(args.model)
    where = f"; weights in {os.path.basename(weights)}" if weights and n_weights else ""
    return f"// Imported from {src} by `distir import`{where}.\n"


def _import(args: argparse.Namespace) -> Any:
    from distir.errors import ConfigError
    from distir.importers.onnx import import_onnx

    dims = parse_dims(args.dim)
    if args.torch is None:
        if args.example:
            raise ConfigError("--example goes with --torch PACKAGE.MODULE:FACTORY")
        if args.model is None:
            raise ConfigError("distir import takes MODEL.onnx or --torch "
                              "PACKAGE.MODULE:FACTORY --example SHAPE ...")
        return import_onnx(args.model, dims=dims, device=args.device)
    from distir.importers.pytorch import (
        example_tensors,
        import_torch,
        load_factory,
        parse_example,
        split_factory,
    )

    if args.model is not None:
        raise ConfigError(f"give MODEL.onnx ({args.model}) or --torch, not both")
    split_factory(args.torch)
    if not args.example:
        raise ConfigError(f"--torch {args.torch}: give one --example SHAPE per forward() "
                          "argument, e.g. --example batch=2,3,32,32")
    examples = [parse_example(e) for e in args.example]
    module = load_factory(args.torch)
    return import_torch(module, example_tensors(examples), dims,
                        dynamic=[d for _, _, d in examples], device=args.device)


def run_import(args: argparse.Namespace) -> int:
    import distir
    from distir.cli import _train
    from distir.ir.text import weights_path

    train = _train.from_args(args)
    m = _import(args)
    if train is not None:
        m = _train.train_module(m, train, args.model or args.torch)
    inits = m.entry.initializers
    text = distir.dumps(m)
    if args.output is None:
        sys.stdout.write(_header(args, len(inits), None) + text)
        if inits:
            nbytes = sum(int(a.nbytes) for a in inits.values())
            print(f"note: the values of {len(inits)} initializers ({nbytes / 1e6:.1f} MB) "
                  "were not written; pass -o OUT.dir to write them to OUT.npz beside it",
                  file=sys.stderr)
        return 0
    out = args.output
    wp = weights_path(out)
    with open(out, "w", encoding="utf-8") as f:
        f.write(_header(args, len(inits), wp) + text)
    if inits:
        _write_npz(wp, inits)
    elif os.path.exists(wp):  # a stale file would be picked up as this module's weights
        os.remove(wp)
        print(f"note: removed {wp}, left by an earlier import (this model has no "
              "initializers)", file=sys.stderr)
    return 0
