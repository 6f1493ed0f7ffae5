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
