"""``distir transform``."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import distir
from distir.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_prints_the_program(capsys: pytest.CaptureFixture) -> None:
    assert main(["transform", str(EXAMPLES / "mlp_step.dir"), "--dp", "2", "--tp", "2",
                 "--pp", "3", "--microbatches", "2", "--schedule", "gpipe"]) == 0
    out = capsys.readouterr().out
    m = distir.parse(out)
    names = {f.name for f in m}
    assert "main" in names and len(names) > 1  # equal units and layers as functions
    distir.infer_types(m.entry)


def test_writes_a_self_contained_program(tmp_path: Path, capsys: pytest.CaptureFixture,
                                         ) -> None:
    out = tmp_path / "out.dir"
    src = EXAMPLES / "mlp_step.dir"
    assert main(["transform", str(src), "--tp", "2", "--pp", "3", "-k", "4",
                 "--self-contained", "-o", str(out)]) == 0
    summary = capsys.readouterr().out
    assert re.match(rf"wrote {re.escape(str(out))}: 6 devices, \d+ functions, ", summary)
    seq = distir.load(src).entry
    dist = distir.load(out).entry
    ins = distir.analysis.random_inputs(seq)
    for a, b in zip(distir.execute(dist, ins), distir.execute(seq, ins), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * float(np.abs(b).max()))


def test_batch_input_by_name(capsys: pytest.CaptureFixture) -> None:
    src = str(EXAMPLES / "mlp_step.dir")
    assert main(["transform", src, "--dp", "2", "--batch-input", "x", "--batch-input",
                 "y"]) == 0
    distir.infer_types(distir.parse(capsys.readouterr().out).entry)
    assert main(["transform", src, "--dp", "2", "--batch-input", "nope"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "batch input 'nope' is not a parameter of @" in err


def test_hardware_weighs_the_stages(capsys: pytest.CaptureFixture) -> None:
    src = str(EXAMPLES / "mlp_step.dir")
    assert main(["transform", src, "--pp", "2", "--hardware", "h200-sxm"]) == 0
    distir.infer_types(distir.parse(capsys.readouterr().out).entry)
    assert main(["transform", src, "--pp", "2", "--hardware", "no-such-card"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown hardware profile 'no-such-card'" in err
