"""distir: find the fastest way to distribute a neural network step over many GPUs.

A distributed step is a DistIR program: a straight-line SSA function whose every op,
transfer and collective is explicit and placed on a device. Load or build one, distribute
it with ``distir.transforms``, and simulate, execute or run it::

    import distir
    m = distir.load("model.dir")
    types = distir.infer_types(m.entry)

Heavy parts (the ONNX importer, the simulator, the PyTorch backend) are imported on first
use, so ``import distir`` stays fast; every subpackage (``distir.analysis``,
``distir.transforms``, ``distir.models``, ``distir.importers``, ``distir.backend``) is
reachable right after ``import distir``.
"""

from __future__ import annotations

import importlib
from typing import Any

from distir.errors import DistIRError
from distir.ir import (
    DType,
    Function,
    FunctionBuilder,
    Module,
    Op,
    ScalarType,
    TensorType,
    TupleType,
    Value,
    dumps,
    load,
    parse,
    verify,
)

__version__ = "0.1.0"

# Public names that live in modules with heavier imports: name -> (module, attribute).
_LAZY: dict[str, tuple[str, str | None]] = {
    "infer_types": ("distir.analysis", "infer_types"),
    "execute": ("distir.analysis", "execute"),
    "import_onnx": ("distir.importers.onnx", "import_onnx"),
    "import_torch": ("distir.importers.pytorch", "import_torch"),
    "simulate": ("distir.analysis.simulator", "simulate"),
    "optimize": ("distir.transforms.spmd.mapping", "optimize"),
    "run": ("distir.backend", "run"),
    "analysis": ("distir.analysis", None),
    "backend": ("distir.backend", None),
    "importers": ("distir.importers", None),
    "models": ("distir.models", None),
    "transforms": ("distir.transforms", None),
}

__all__ = [
    "DType",
    "DistIRError",
    "Function",
    "FunctionBuilder",
    "Module",
    "Op",
    "ScalarType",
    "TensorType",
    "TupleType",
    "Value",
    "dumps",
    "load",
    "parse",
    "verify",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'distir' has no attribute {name!r}")
    mod = importlib.import_module(target[0])
    value = mod if target[1] is None else getattr(mod, target[1])
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
