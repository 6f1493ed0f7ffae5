"""An ONNX model's skeleton: the file without its large floating-point weights.

A study measured on another machine is re-simulated here from the model file it searched
(``python -m grid_search.study compare CSV --model FILE``), and that must be the very graph
the machine exported: another torch version exports another graph (other op sequences,
other fusions), which ``compare`` refuses by the rows' program fingerprints. The weights
are most of the file (a 12-layer transformer: 350-600 MB) and change no simulated figure,
so the machine writes a skeleton instead, small enough to bring back::

    python -m grid_search.skeleton strip MODEL.onnx MODEL.skel.onnx   # where it was exported
    python -m grid_search.skeleton fill MODEL.skel.onnx MODEL.onnx    # where it is simulated

A skeleton named ``*.xz`` is written and read xz-compressed (its graph, 0.2-1.5 MB for
the models of the results folders, shrinks about five times).

``strip`` empties every floating-point initializer of more than ``KEEP`` elements and
records which in the model's metadata (``distir.skeleton``); integer initializers (shapes,
indices, position buffers) and small scalars (an attention scale, GELU's exponent, a mask's
fill value, T5's relative position table) stay, since they decide shapes, are folded into
the program or are compiled into the step. ``fill`` gives
the emptied ones deterministic random values (normal, standard deviation 0.02, seeded by
the name), so a filled skeleton imports to the same program text as the original.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from typing import Any

from distir.analysis.values import CONCRETE_LIMIT

KEEP = CONCRETE_LIMIT
"""Floating-point initializers of at most this many elements stay in a skeleton: as many as
type propagation reads as known values (``distir.analysis.values.CONCRETE_LIMIT``), which
the search's programs may fold into constants of their text."""

_KEY = "distir.skeleton"
_FLOATS = {1: "float32", 10: "float16", 11: "float64", 16: "bfloat16"}
"""ONNX TensorProto data types a skeleton empties, by their numpy names (bfloat16: by
its bits, below)."""


def _numel(t: Any) -> int:
    n = 1
    for d in t.dims:
        n *= int(d)
    return n


def _stripped_names(model: Any) -> list[str]:
    for p in model.metadata_props:
        if p.key == _KEY:
            return list(json.loads(p.value))
    return []


def _load(path: str) -> Any:
    """An ONNX model from ``path``, xz-compressed where it ends in ``.xz``."""
    import onnx

    if path.endswith(".xz"):
        import lzma

        with lzma.open(path) as f:
            return onnx.load_model_from_string(f.read())
    return onnx.load(path)


def strip(src: str, dst: str) -> int:
    """Write ``src``'s skeleton to ``dst`` (xz-compressed where ``dst`` ends in ``.xz``);
    the number of initializers emptied."""
    import onnx

    model = _load(src)
    if _stripped_names(model):
        raise ValueError(f"{src} is already a skeleton")
    names = []
    for t in model.graph.initializer:
        if t.data_type in _FLOATS and _numel(t) > KEEP:
            for field in ("raw_data", "float_data", "double_data", "int32_data"):
                t.ClearField(field)
            names.append(t.name)
    model.metadata_props.add(key=_KEY, value=json.dumps(names))
    if dst.endswith(".xz"):
        import lzma

        with lzma.open(dst, "wb", preset=9) as f:
            f.write(model.SerializeToString())
    else:
        onnx.save(model, dst)
    return len(names)


def fill(src: str, dst: str) -> int:
    """Write ``src`` (a skeleton, xz-compressed where it ends in ``.xz``) with values in its
    emptied initializers to ``dst``; the number filled."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    model = _load(src)
    names = set(_stripped_names(model))
    if not names:
        raise ValueError(f"{src} is not a skeleton (no {_KEY} metadata): nothing to fill")
    done = 0
    for i, t in enumerate(model.graph.initializer):
        if t.name not in names:
            continue
        seed = int.from_bytes(hashlib.sha256(t.name.encode()).digest()[:8], "little")
        shape = tuple(int(d) for d in t.dims)
        v = np.random.default_rng(seed).normal(0.0, 0.02, shape).astype(np.float32)
        if t.data_type == 16:  # bfloat16: the upper half of each float32
            new = onnx.helper.make_tensor(t.name, 16, shape,
                                          (v.view(np.uint32) >> 16).astype(np.uint16)
                                          .tobytes(), raw=True)
        else:
            new = numpy_helper.from_array(v.astype(_FLOATS[t.data_type]), t.name)
        model.graph.initializer[i].CopyFrom(new)
        done += 1
    kept = [p for p in model.metadata_props if p.key != _KEY]
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    onnx.save(model, dst, save_as_external_data=model.ByteSize() > 1_900_000_000)
    return done


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m grid_search.skeleton", description=__doc__
                                 .split("\n\n")[0])
    ap.add_argument("action", choices=["strip", "fill"])
    ap.add_argument("src")
    ap.add_argument("dst")
    a = ap.parse_args(argv)
    try:
        n = (strip if a.action == "strip" else fill)(a.src, a.dst)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # onnx's DecodeError and friends: not an ONNX file
        print(f"error: {a.src}: not an ONNX model ({type(e).__name__}: {e})", file=sys.stderr)
        return 1
    verb = "emptied" if a.action == "strip" else "filled"
    print(f"wrote {a.dst}: {n} initializers {verb}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
