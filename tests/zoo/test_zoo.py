"""Every (model, exporter) pair of the zoo imports, types every value (also re-bound to
other sizes, without executing), executes within 1e-4 relative of onnxruntime and
simulates; or fails exactly as ``tests/zoo/known.py`` says (and docs/zoo.md lists). The
exporters are torch's two and ``distir.import_torch``'s, whose export also keeps every
parameter under its torch name with its value.

The first test of each model exports it (both exporters, cached under
``.pytest_cache/distir-zoo``): about 1 to 2 minutes for the whole zoo on two cores.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.zoo.check import RTOL
from tests.zoo.known import KNOWN
from tests.zoo.models import ALL_EXPORTERS, BY_NAME, SPECS

PAIRS = [(s.name, e) for s in SPECS for e in ALL_EXPORTERS]
IDS = [f"{m}-{e}" for m, e in PAIRS]
_DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "zoo.md")


@pytest.mark.parametrize(("model", "exporter"), PAIRS, ids=IDS)
def test_pair_passes_or_fails_as_known(zoo_result, model, exporter):
    r = zoo_result(model, exporter)
    k = KNOWN.get((model, exporter))
    if k is None:
        assert r.ok, f"{r.stage or 'rebind'}: {r.error or r.rebind_error}"
        assert r.rel_error is not None and r.rel_error <= RTOL
        assert r.latency_s is not None and r.latency_s > 0
        return
    error = r.rebind_error if k.stage == "rebind" else r.error
    got = "rebind" if k.stage == "rebind" and r.rebind_error else r.stage
    assert got == k.stage and k.match in error, (
        f"the known failure of {model}/{exporter} ({k.stage}: {k.match}) changed: now "
        f"{r.stage or 'passes'} {r.error or r.rebind_error}; update tests/zoo/known.py and "
        "docs/zoo.md (python -m tests.zoo.report)")
    assert "\n" not in error  # one line
    if k.stage == "rebind":  # the other stages pass
        assert r.stage is None, r.error


@pytest.mark.parametrize(("model", "exporter"), PAIRS, ids=IDS)
def test_import_and_types_take_less_than_the_export(zoo_result, model, exporter):
    r = zoo_result(model, exporter)
    if "types" not in r.seconds or r.stage == "types":
        pytest.skip(f"{model}/{exporter} does not type ({r.error})")
    assert r.seconds["import"] + r.seconds["types"] < r.seconds["export"], r.seconds


def test_every_failure_is_a_known_one(zoo_result):
    failed = {p for p in PAIRS if not zoo_result(*p).ok}
    assert failed == set(KNOWN), failed ^ set(KNOWN)


def test_docs_list_every_pair_and_every_known_failure():
    with open(_DOCS, encoding="utf-8") as f:
        text = f.read()
    for model, exporter in PAIRS:
        assert f"| {model} | {exporter} |" in text, (model, exporter)
    for k in KNOWN.values():
        assert k.reason in text, k.reason


@pytest.mark.parametrize("model", [s.name for s in SPECS])
def test_import_torch_keeps_every_parameter_by_its_torch_name(zoo_result, model):
    import onnx
    from onnx import numpy_helper

    from tests.zoo.export import exported

    zoo_result(model, "import_torch")  # exported (and checked) once per session
    graph = onnx.load(exported(BY_NAME[model], "import_torch").path).graph
    inits = {t.name: t for t in graph.initializer}
    net = BY_NAME[model].build()
    for name, p in net.named_parameters():
        # A tied parameter (T5's shared embedding) may appear under another of its names.
        aliases = [n for n, q in net.named_parameters(remove_duplicate=False) if q is p]
        found = [n for n in aliases if n in inits]
        assert found, f"parameter {name} is not an initializer under any of {aliases}"
        np.testing.assert_array_equal(numpy_helper.to_array(inits[found[0]]),
                                      p.detach().numpy())
