"""The ``slow`` marker: tests that take more than a few seconds each (the larger light
models executed in numpy, the larger sweeps of the pipeline passes). They are skipped
unless a marker expression is given: ``pytest tests/importers -m slow`` runs only them,
``-m "slow or not slow"`` runs all."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture
def host_profile(tmp_path: Path) -> Path:
    """A profile file: ``h100-sxm`` whose hosts take 1 ms to issue any op (``h100-host``),
    so that a step's simulated time is the hosts' unless host dispatch is dropped (CUDA
    graph replays, ``Hardware.for_cuda_graphs``)."""
    prof = tmp_path / "host.json"
    prof.write_text(json.dumps({"format": "distir-hardware/1", "base": "h100-sxm",
                                "name": "h100-host", "device": {"host_dispatch": {"*": 1e-3}}}))
    return prof


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: takes more than a few seconds; run with -m slow")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("markexpr", ""):
        return
    skip = pytest.mark.skip(reason="slow: run with -m slow (or -m 'slow or not slow' for all)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
