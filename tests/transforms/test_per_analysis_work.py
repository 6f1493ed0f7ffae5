"""Work the transform does once per analysis rather than per configuration (issue 20): the
divisibility check is kept per (sharding, tp, dp x microbatches), and a batch-independent
value too large to fold is never computed."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import distir
from distir.errors import TransformError
from distir.transforms import analyze, hoist, tower


def test_divisibility_checked_once_per_sharding_tp_and_splits(monkeypatch: Any) -> None:
    from distir.transforms import plan

    an = analyze(distir.models.mlp(batch_size=16, input_dim=4, hidden_dim=8, output_dim=4,
                                   num_layers=4))
    seen: list[tuple[int, int]] = []
    real = plan.Plan._check_tensor_once

    def check(self: plan.Plan) -> None:
        seen.append((self.tp, self.nb))
        if self.nb == 8:
            raise TransformError(f"refused at nb={self.nb}")
        real(self)

    monkeypatch.setattr(plan.Plan, "_check_tensor_once", check)
    for cfg in [(2, 1, 2, 2), (1, 1, 2, 4), (2, 1, 1, 1), (2, 2, 2, 2), (4, 1, 2, 1)]:
        tower.dtp(an, *cfg)
    for _ in range(2):
        with pytest.raises(TransformError, match="refused at nb=8"):
            tower.dtp(an, 2, 1, 2, 4)
    assert sorted(seen) == [(1, 2), (1, 4), (1, 8), (2, 4)]


class _Recording:
    """``NUMPY_RULES`` whose rules record the size of every result they compute."""

    def __init__(self, rules: Any, sizes: list[int]) -> None:
        self.rules, self.sizes = rules, sizes

    def get(self, op_type: str) -> Any:
        rule = self.rules.get(op_type)
        if rule is None:
            return None

        def run(*args: Any) -> Any:
            out = rule(*args)
            self.sizes.extend(np.asarray(r).size for r in out)
            return out

        return run


def test_large_batch_independent_values_are_not_computed(monkeypatch: Any) -> None:
    """GPT-2's causal mask at sequence 64 (64 x 64 elements per head group) is above the
    fold limit: the transform emits its ops without evaluating it with numpy."""
    g = distir.models.gpt2(n_layer=2, d_model=32, n_head=4, vocab_size=64, seq_len=64,
                           batch_size=4)
    sizes: list[int] = []
    monkeypatch.setattr(hoist, "NUMPY_RULES", _Recording(hoist.NUMPY_RULES, sizes))
    tower.dtp(analyze(g), dp=2, tp=2, pp=2, microbatches=2)
    assert sizes and max(sizes) <= hoist.FOLD_LIMIT
