"""Impossible configurations are refused with one line naming the failed constraint and
its numbers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import distir
from distir.errors import TransformError
from distir.ir import DType, FunctionBuilder, TensorType
from distir.transforms import dtp

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _mlp(batch: int = 8, hidden: int = 8, layers: int = 4) -> distir.Function:
    return distir.models.mlp(batch_size=batch, input_dim=4, hidden_dim=hidden, output_dim=4,
                             num_layers=layers)


def _no_layers() -> distir.Function:
    b = FunctionBuilder("main")
    x = b.param("x", TensorType(DType.Float32, (8, 4), 0))
    return b.ret(b.op("Relu", x, name="y"))


CASES = [
    (lambda: dtp(_mlp(batch=6), dp=4),
     r"^error: dp=4 does not divide the batch size 6 \(dimension 0 of %x\)$"),
    (lambda: dtp(_mlp(batch=8), dp=2, microbatches=3),
     r"^error: microbatches=3 does not divide the per-replica batch 4 \(batch size 8 / "
     r"dp=2\)$"),
    (lambda: dtp(_mlp(layers=2), pp=4),
     r"^error: pp=4 is more pipeline stages than @main can be cut into \(2 at most\)$"),
    (lambda: dtp(_no_layers(), pp=2, batch_inputs=["x"]),
     r"^error: pp=2 is more pipeline stages than the 1 forward op of @main that runs per "
     r"microbatch$"),
    (lambda: dtp(_mlp(), dp=0), r"^error: dp must be a positive integer, got 0$"),
    (lambda: dtp(_mlp(), microbatches=2.0), r"^error: microbatches must be a positive "
     r"integer, got 2\.0$"),
    (lambda: dtp(_mlp(), pp=2, schedule="zero-bubble"),
     r"^error: unknown schedule 'zero-bubble': choose one of gpipe, 1f1b$"),
    (lambda: dtp(distir.load(EXAMPLES / "mlp_step_dp2.dir")),
     r"^error: @main already communicates \(MPIBroadcast\): distribute a sequential "
     r"function$"),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_refused_with_the_constraint(case: int) -> None:
    make, pattern = CASES[case]
    with pytest.raises(TransformError, match=pattern) as info:
        make()
    assert "\n" not in str(info.value)


def _softmax_over_batch() -> distir.Function:
    b = FunctionBuilder("main")
    x = b.param("x", TensorType(DType.Float32, (4, 3), 0))
    w = b.param("w", TensorType(DType.Float32, (3, 3), 0))
    h = b.op("MatMul", x, w, name="h")
    return b.ret(b.op("Softmax", h, axis=0, name="p"))


def test_an_op_that_mixes_the_batch_is_refused() -> None:
    fn = _softmax_over_batch()
    dtp(fn)  # nothing to split: fine
    with pytest.raises(TransformError, match=r"cannot split the batch over replicas and "
                       r"microbatches: `%p = Softmax\(%h, axis=0\)`: Softmax along a split "
                       r"axis"):
        dtp(fn, dp=2)


def test_cli_prints_one_line_and_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture,
                                         ) -> None:
    from distir.cli import main

    src = tmp_path / "mlp.dir"
    src.write_text(distir.dumps(_mlp(batch=6)), encoding="utf-8")
    assert main(["transform", str(src), "--dp", "4"]) == 1
    err = capsys.readouterr().err
    assert err == "error: dp=4 does not divide the batch size 6 (dimension 0 of %x)\n"


def test_pp1_never_needs_layers() -> None:
    """One stage holds the whole program, whether or not it has repeated layers."""
    fn = _no_layers()
    out = dtp(fn, pp=1)
    x = np.arange(32, dtype=np.float32).reshape(8, 4) - 16
    np.testing.assert_array_equal(distir.execute(out, [x])[0], np.maximum(x, 0))


def test_an_unnamed_value_is_named_as_printed() -> None:
    """A refusal names an input as ``distir.dumps`` prints it (``%1``), never ``%None``."""
    from distir.ir import DType, FunctionBuilder, TensorType
    from distir.transforms.spmd.propagate import program_of

    b = FunctionBuilder("main")
    x = b.param("x", TensorType(DType.Float32, (4, 8), 0))
    r = b.op("Relu", x)
    fn = b.ret(b.op("Relu", r))
    prog = program_of(fn)
    assert r.name is None or r.name.isdigit()
    assert prog.value_text(r) == "%0" and prog.value_text(x) == "%x"
