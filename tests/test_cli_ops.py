"""``distir ops``: the op set as the rule tables hold it."""

from __future__ import annotations

import json

import pytest

from distir.cli import main
from distir.ir.schemas import SCHEMAS


def _json(capsys: pytest.CaptureFixture, *argv: str) -> dict:
    assert main(["ops", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_lists_every_op_with_its_interpretations(capsys) -> None:
    doc = _json(capsys)
    assert {r["op"] for r in doc["ops"]} == set(SCHEMAS)
    by = {r["op"]: r for r in doc["ops"]}
    assert by["MatMul"]["interpretations"] == {k: True for k in (
        "types", "reference", "cost", "lowering", "layout", "vjp")}
    assert by["MPIAllreduce"]["domain"] == "comm"
    assert by["MPIAllreduce"]["interpretations"]["types"] is True


def test_marks_come_from_the_tables(capsys, monkeypatch) -> None:
    from distir.analysis.cost import COST_RULES, load_cost_rules

    load_cost_rules()
    monkeypatch.delitem(COST_RULES.rules, "Relu")
    assert _json(capsys, "Relu")["interpretations"]["cost"] is False
    doc = _json(capsys, "--missing", "cost")
    assert "Relu" in {r["op"] for r in doc["ops"]}


def test_one_op_shows_signature_and_defaults(capsys) -> None:
    assert main(["ops", "Gemm"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Gemm(A, B, [C]) -> 1 result\n")
    assert "alpha: float (default 1.0)" in out and "transA: int (default 0)" in out
    assert "has: types, reference, cost, lowering" in out


def test_unknown_op_is_one_line_with_suggestions(capsys) -> None:
    assert main(["ops", "Matmul"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == "error: unknown op 'Matmul'; did you mean MatMul, Mul, MatMulGrad?"


def test_the_verifier_points_at_a_command_that_exists(capsys) -> None:
    """Unknown ops in a program name `distir ops`, which runs."""
    import distir
    from distir.errors import VerifyError

    with pytest.raises(VerifyError, match=r"see `distir ops`"):
        distir.parse("func @main(%x) {\n  %y = Qqqqqqqq(%x)\n  return %y\n}\n")
    assert main(["ops"]) == 0
    assert "ops; " in capsys.readouterr().out


def test_domain_filter(capsys) -> None:
    doc = _json(capsys, "--domain", "train")
    assert doc["ops"] and all(r["domain"] == "train" for r in doc["ops"])
