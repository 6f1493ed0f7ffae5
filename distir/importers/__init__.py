"""Importers: programs written elsewhere, turned into DistIR modules.

- ``distir.importers.onnx``: ``import_onnx(path_or_model, dims=None, device=0)``, an ONNX
  model (any opset the version converter can reach) as a module whose ``@main`` has the
  graph's inputs and initializers as typed parameters and the initializer values attached.
- ``distir.importers.pytorch``: ``import_torch(module, example_inputs, dims=None, ...)``, a
  ``torch.nn.Module`` exported with ``torch.onnx.export(dynamo=True)`` and imported as above,
  its parameters keeping their torch names.
- ``distir.importers.conformance``: the harness that runs ONNX's own backend node tests and
  shipped models through the importer, the type rules and the reference executor.

Importing this package imports nothing heavy; ``onnx`` is imported by the submodules.
"""

from __future__ import annotations

from typing import Any

__all__ = ["import_onnx", "import_torch"]


def __getattr__(name: str) -> Any:
    if name == "import_onnx":
        from distir.importers.onnx import import_onnx

        return import_onnx
    if name == "import_torch":
        from distir.importers.pytorch import import_torch

        return import_torch
    raise AttributeError(f"module 'distir.importers' has no attribute {name!r}")
