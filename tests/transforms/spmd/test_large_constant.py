"""A ``Constant`` too large for the type propagator to keep its value (more than
``CONCRETE_LIMIT`` elements: an export's index table, as the torchscript export of a Swin
transformer writes for its shifted windows) is still known before running: ``dtp`` places
it on every device and the distributed program computes the sequential results."""

from __future__ import annotations

import numpy as np
import pytest

import distir
from distir.analysis.values import CONCRETE_LIMIT
from distir.ir import DType, FunctionBuilder, TensorType
from distir.transforms import analyze, dtp


def _step() -> object:
    n = 2 * CONCRETE_LIMIT
    b = FunctionBuilder("main")
    x = b.param("x", TensorType(DType.Float32, (4, n), 0))
    w = b.param("w", TensorType(DType.Float32, (n, 16), 0))
    c = b.op("Constant", value=np.linspace(-1.0, 1.0, n, dtype=np.float32), name="table")
    return b.ret(b.op("MatMul", b.op("Add", x, c), w))


@pytest.mark.parametrize("cfg", [dict(tp=2), dict(dp=2), dict(dp=1), dict(pp=2, microbatches=2)],
                         ids=str)
def test_a_large_constant_is_placed_on_every_device(cfg: dict) -> None:
    fn = _step()
    rng = np.random.default_rng(0)
    ins = [rng.standard_normal(p.type.shape).astype(np.float32) for p in fn.params]
    want = distir.execute(fn, ins)
    sc = dtp(analyze(fn, batch_inputs=["x"]), self_contained=True, **cfg)
    got = distir.execute(sc, ins, check_types=False)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-4)


def test_an_error_names_a_large_constant_briefly() -> None:
    """Error messages quote ops by ``Program.op_text``: a large constant's value is shown
    as its type and ``[...]``, a small one in full."""
    from distir.transforms.spmd.propagate import program_of

    prog = program_of(_step())
    big = next(op for op in prog.ops if op.op_type == "Constant")
    assert prog.op_text(big) == (f"%table = Constant(value=dense<Float32, "
                                 f"({2 * CONCRETE_LIMIT},)>[...])")
    assert prog.constant(big.outputs[0]).shape == (2 * CONCRETE_LIMIT,)
    assert prog.const(big.outputs[0]) is None  # not kept by the type propagator
