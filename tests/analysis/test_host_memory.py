"""Runs too big for this machine are refused in one line before anything is allocated."""

from __future__ import annotations

import time

import numpy as np
import pytest

import distir
from distir.analysis.api import check_host_memory, host_memory_needed
from distir.errors import ExecutionError


def _program(batch: int) -> distir.Module:
    return distir.parse(
        f"func @main(%x: Tensor[Float32, ({batch}, 16), 0], %w: Tensor[Float32, (16, 64), 0]) "
        "{\n  %h = MatMul(%x, %w)\n  %y = Relu(%h)\n  return %y\n}\n")


def test_lower_bound_is_inputs_and_largest_result() -> None:
    fn = _program(8).entry
    total, inputs, biggest, big = host_memory_needed(fn)
    assert inputs == (8 * 16 + 16 * 64) * 4
    assert big == 8 * 64 * 4 and biggest is not None and biggest.name == "h"
    assert total == inputs + big


def test_refused_before_allocating() -> None:
    fn = _program(8).entry
    check_host_memory(fn, available=10**9)  # fits
    with pytest.raises(ExecutionError, match=r"^<string>:1:6: error: executing @main needs at "
                       r"least 20\.0 MiB: its inputs \(4\.0 MiB\) and its largest result %h "
                       r"\(16\.0 MiB\), more than the 1\.0 MiB this machine has available; "
                       r"bind smaller dimensions"):
        check_host_memory(_program(2**16).entry, available=2**20)


def test_cli_execute_says_so_in_one_line(tmp_path, capsys) -> None:
    from distir.cli import main

    path = tmp_path / "huge.dir"
    path.write_text(distir.dumps(_program(10**11)), encoding="utf-8")  # 6 TB of input
    t0 = time.perf_counter()
    assert main(["execute", str(path)]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "internal error" not in err
    assert "huge.dir:1:6: error: executing @main needs at least" in err
    assert "this machine has available" in err
    assert time.perf_counter() - t0 < 30


def test_random_inputs_refuse_what_cannot_be_held() -> None:
    fn = _program(10**11).entry
    with pytest.raises(ExecutionError, match=r"the inputs of @main take .* GiB, more than"):
        distir.analysis.random_inputs(fn)
    assert [a.shape for a in distir.analysis.random_inputs(_program(4).entry)] == [
        (4, 16), (16, 64)]
    assert isinstance(distir.execute(_program(4), distir.analysis.random_inputs(
        _program(4).entry))[0], np.ndarray)
