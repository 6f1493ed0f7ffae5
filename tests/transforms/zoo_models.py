"""The zoo's imported models and their transform analyses, shared by the zoo transform
tests: each (model, exporter) is imported and analysed once per test session."""

from __future__ import annotations

from typing import Any

import pytest

import distir
from distir.transforms import Analysis, analyze
from tests.zoo.export import ExportFailed, exported
from tests.zoo.models import BY_NAME

BATCH = 4
"""The batch size the zoo transform tests bind."""

_cache: dict[tuple, Any] = {}


def zoo_analysis(name: str, exporter: str, batch: int = BATCH, seq: int | None = None,
                 ) -> tuple[distir.Module, Analysis]:
    """The imported model (batch ``batch``, sequences of ``seq`` tokens for token models,
    default the zoo's) and its analysis; skipped when the exporter fails on the model (the
    zoo's own tests report that). Callers must not modify them."""
    key = (name, exporter, batch, seq)
    if key not in _cache:
        spec = BY_NAME[name]
        try:
            path = exported(spec, exporter).path
        except ExportFailed as e:
            _cache[key] = str(e)
        else:
            dims = spec.dims(batch=batch) if seq is None else spec.dims(batch=batch, seq=seq)
            m = distir.import_onnx(path, dims=dims)
            _cache[key] = (m, analyze(m.entry))
    got = _cache[key]
    if isinstance(got, str):
        pytest.skip(f"{name} does not export with {exporter}: {got}")
    return got


def zoo_inputs(name: str) -> list[Any]:
    """The model's free inputs at ``BATCH`` (the weights are bound to initializers)."""
    return [t.numpy() for t in BY_NAME[name].inputs(BATCH, 8)]
