"""The builder: its doctest (which ends in printed IR) and what it builds."""

from __future__ import annotations

import doctest

import numpy as np
import pytest

import distir
import distir.ir.builder
from distir.errors import VerifyError
from distir.ir import DType, FunctionBuilder, TensorType


def test_builder_doctest() -> None:
    res = doctest.testmod(distir.ir.builder, optionflags=doctest.ELLIPSIS, verbose=False)
    assert res.attempted > 0
    assert res.failed == 0


def test_built_functions_verify_and_round_trip() -> None:
    t = TensorType(DType.Float32, (4, 4), 0)
    inner = FunctionBuilder("inner")
    a = inner.param("a")
    f_inner = inner.ret(inner.op("Relu", a, name="r"))
    b = FunctionBuilder("main")
    x = b.param("x", t)
    c = b.op("Constant", value=np.array([[1.0, 2.0]], np.float32), name="c")
    y = b.call(f_inner, x, name="y")
    s0, s1 = b.op("MPIAllreduce", y, y, name=("s0", "s1"))  # one result per input
    fn = b.ret(s0, c, return_types=[t, t])
    distir.verify(fn)
    text = distir.dumps(fn)
    assert text.startswith("func @inner(%a) {")
    assert "%y = call @inner(%x)" in text
    assert "%s0, %s1 = MPIAllreduce(%y, %y)" in text
    assert "%c = Constant(value=dense<Float32>[[1.0, 2.0]])" in text
    assert "func @main(%x: Tensor[Float32, (4, 4), 0]) -> (Tensor" in text
    assert distir.dumps(distir.parse(text)) == text


def test_builder_errors() -> None:
    b = FunctionBuilder("f")
    x = b.param("x")
    with pytest.raises(VerifyError, match=r"^error: unknown op 'Nope'$"):
        b.op("Nope", x)
    with pytest.raises(VerifyError, match=r"variable number of results: pass num_results="):
        b.op("MPIBroadcast", x)  # the count comes from `devices`, which is missing
    with pytest.raises(ValueError, match=r"2 names given for 1 results"):
        b.op("Relu", x, name=["a", "b"])


def test_call_of_a_function_without_results_is_rejected() -> None:
    nothing = FunctionBuilder("nothing").ret()
    b = FunctionBuilder("main")
    b.call(nothing)
    with pytest.raises(VerifyError, match=r"@nothing here gives no results, so the statement "
                                          r"does nothing: remove it"):
        distir.verify(b.ret())
