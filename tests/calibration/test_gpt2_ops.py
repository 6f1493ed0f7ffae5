"""The per-op GPT-2 diagnostic runs on a CPU with a tiny model and times every op."""

from __future__ import annotations

import pytest

from calibration.gpt2_ops import main


def test_gpt2_ops_prints_every_op(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--batch", "2", "--seq", "32", "--width", "64", "--heads", "4",
                 "--vocab", "101", "--dtype", "float32"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("# ") and len(lines) == 21
    times = [float(line.split()[-2]) for line in lines[1:]]
    assert all(t > 0 for t in times)
    assert any(line.startswith("copy k (0,2,3,1)") for line in lines)
