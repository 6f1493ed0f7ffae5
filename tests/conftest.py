"""The ``slow`` marker: tests that take more than a few seconds each (the larger light
models executed in numpy, the larger sweeps of the pipeline passes). They are skipped
unless a marker expression is given: ``pytest tests/importers -m slow`` runs only them,
``-m "slow or not slow"`` runs all."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: takes more than a few seconds; run with -m slow")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("markexpr", ""):
        return
    skip = pytest.mark.skip(reason="slow: run with -m slow (or -m 'slow or not slow' for all)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
