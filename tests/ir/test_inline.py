"""Inlining keeps the results and removes every call."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import distir
from distir.analysis import random_inputs
from distir.ir import inline_calls, verify

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_inlined_examples_compute_the_same_results() -> None:
    for name in ("mlp_step_dp2.dir", "mlp_step_pp2.dir"):
        fn = distir.load(str(EXAMPLES / name)).entry
        flat = inline_calls(fn)
        verify(flat)
        assert all(op.callee is None for op in flat.ops)
        assert len(flat.ops) == fn.num_ops(inline_calls=True)
        xs = random_inputs(fn, seed=3)
        for a, b in zip(distir.execute(fn, xs), distir.execute(flat, xs)):
            np.testing.assert_allclose(a, b, rtol=1e-6)
        # The text of the flat function parses back to itself.
        text = distir.dumps(flat)
        assert distir.dumps(distir.parse(text)) == text


def test_consecutive_calls_that_read_each_other_are_not_interleaved() -> None:
    """``inline_top_calls`` interleaves consecutive calls of one function op by op (the
    replicas' copies), but a call that reads an earlier one's result (a layer after a
    layer) is written after it."""
    from distir.ir.inline import inline_top_calls

    fn = distir.parse("""func @layer(%x) {
  %h = Relu(%x)
  %y = Neg(%h)
  return %y
}

func @main(%a: Tensor[Float32, (3,), 0], %b: Tensor[Float32, (3,), 0]) {
  %a1 = call @layer(%a)
  %b1 = call @layer(%b)
  %a2 = call @layer(%a1)
  return %a2, %b1
}
""").entry
    flat = inline_top_calls(fn, lambda f: True)
    verify(flat)
    assert [op.op_type for op in flat.ops] == ["Relu", "Relu", "Neg", "Neg", "Relu", "Neg"]
    xs = random_inputs(fn, seed=1)
    for a, b in zip(distir.execute(fn, xs), distir.execute(flat, xs)):
        np.testing.assert_array_equal(a, b)
