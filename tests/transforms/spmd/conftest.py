"""The ``slow`` marker here (as in ``tests/importers``): the larger configuration sweeps of
the pipeline passes. Skipped unless a marker expression is given:
``pytest tests/transforms/spmd -m slow`` runs only them, ``-m "slow or not slow"`` runs all."""

from __future__ import annotations

import os

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: takes more than a few seconds; run with -m slow")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("markexpr", ""):
        return
    skip = pytest.mark.skip(reason="slow: run with -m slow (or -m 'slow or not slow' for all)")
    for item in items:
        if "slow" in item.keywords and str(item.path).startswith(_HERE):
            item.add_marker(skip)
