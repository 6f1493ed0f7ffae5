"""The zoo's results, one ``check`` per (model, exporter) pair per test session."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.zoo.check import Result


@pytest.fixture(scope="session")
def zoo_result() -> Callable[[str, str], Result]:
    """``zoo_result(model, exporter)``: the pair's ``Result``, checked once per session."""
    import onnxruntime  # noqa: F401 - the test needs it
    import transformers  # noqa: F401 - the test needs it

    from tests.zoo.check import check
    from tests.zoo.models import BY_NAME

    done: dict[tuple[str, str], Result] = {}

    def get(model: str, exporter: str) -> Result:
        key = (model, exporter)
        if key not in done:
            done[key] = check(BY_NAME[model], exporter)
        return done[key]

    return get
