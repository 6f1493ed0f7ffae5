"""ONNX's backend node tests for every op of the spec's minimum set, and for the other ONNX
ops DistIR defines (``ZOO_OPS``: those of exported Hugging Face / torchvision-like models).

Each case imports, type-propagates to the expected outputs' dtypes and shapes, and executes
to the expected values within the case's tolerances. Cases outside DistIR's spec are
skipped with the reason ``distir.importers.conformance.exclusion`` gives, decided from the
case alone. docs/conformance.md tabulates the results (scripts/conformance_table.py).
"""

from __future__ import annotations

import pytest

from distir.importers.conformance import SPEC_OPS, ZOO_OPS, node_cases, run_node_case

CASES = node_cases()
ZOO_CASES = node_cases(ZOO_OPS)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_node_case(case):
    if case.excluded:
        pytest.skip(case.excluded)
    run_node_case(case)


@pytest.mark.parametrize("case", ZOO_CASES, ids=[c.name for c in ZOO_CASES])
def test_zoo_node_case(case):
    if case.excluded:
        pytest.skip(case.excluded)
    run_node_case(case)


def test_every_zoo_op_has_cases_that_run():
    ops_run = {c.op for c in ZOO_CASES if not c.excluded}
    # GlobalMaxPool's only cases are written for opset 22, which onnx's version converter
    # cannot take down to 21 (tests/analysis and tests/backend check the op itself).
    assert set(ZOO_OPS) - ops_run == {"GlobalMaxPool"}, sorted(set(ZOO_OPS) - ops_run)
    assert all("no adapter down" in (c.excluded or "") for c in ZOO_CASES
               if c.op == "GlobalMaxPool")
    assert not set(ZOO_OPS) & set(SPEC_OPS)


def test_every_spec_op_has_cases_that_run():
    ops_run = {c.op for c in CASES if not c.excluded}
    assert ops_run == set(SPEC_OPS), sorted(set(SPEC_OPS) - ops_run)


def test_exclusions_are_a_minority():
    # The spec excludes dtypes, sequences and random outputs, not whole ops or most cases.
    for cases in (CASES, ZOO_CASES):
        excluded = sum(1 for c in cases if c.excluded)
        assert excluded < len(cases) / 2


def test_imported_cases_print_and_parse_back():
    """The text of every imported case parses back to the same text (attributes of every
    kind the suite uses: dense literals, floats, lists, dtypes)."""
    import distir
    from distir.importers.onnx import import_onnx

    bad = []
    for c in CASES + ZOO_CASES:
        if c.excluded:
            continue
        text = distir.dumps(import_onnx(c.model))
        if distir.dumps(distir.parse(text, filename=c.name)) != text:
            bad.append(c.name)
    assert not bad
