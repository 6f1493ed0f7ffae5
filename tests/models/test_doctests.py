"""The docstring examples of the model builders (the MLP's ends in its printed IR)."""

from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize("name", ["distir.models.mlp", "distir.models.gpt2",
                                  "distir.models.presets"])
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0
