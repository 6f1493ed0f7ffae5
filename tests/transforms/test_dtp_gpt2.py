"""Differential tests of D/T/P/K on GPT-2 inference: every configuration of the grid (one
schedule: an inference step has no backward, so GPipe and 1F1B write the same program)."""

from __future__ import annotations

import pytest

import distir
from distir.transforms import dtp, tower
from tests.transforms.helpers import cfg_id, check_equivalent, grid, small_gpt2


@pytest.mark.parametrize("cfg", grid(), ids=cfg_id)
def test_gpt2_matches_sequential(cfg: tuple[int, int, int, int]) -> None:
    dp, tp, pp, k = cfg
    check_equivalent(small_gpt2(dp * k), cfg, "1f1b")


def test_schedules_agree_for_inference() -> None:
    _, an, _, _ = small_gpt2(4)
    assert distir.dumps(dtp(an, 1, 2, 2, 4, schedule="gpipe")) == \
        distir.dumps(dtp(an, 1, 2, 2, 4, schedule="1f1b"))


def test_heads_are_split_and_projections_paired() -> None:
    """Attention split by heads (QKV column-parallel in 3 groups, output projection
    row-parallel), MLP column/row: one allreduce per pair, embeddings and head whole."""
    _, an, _, _ = small_gpt2(2)
    step = tower.dtp(an, tp=4)
    shapes = {p.name: p.type.shape for p in step.params}
    assert shapes["h.0.attn.c_attn.weight_tp0"] == (16, 12)
    assert shapes["h.0.attn.c_attn.bias_tp0"] == (12,)
    assert shapes["h.0.attn.c_proj.weight_tp0"] == (4, 16)
    assert shapes["h.0.mlp.c_fc.weight_tp0"] == (16, 16)
    assert shapes["h.0.mlp.c_proj.weight_tp0"] == (16, 16)
    assert shapes["wte_tp0"] == (11, 16) and shapes["h.0.ln_1.weight_tp0"] == (16,)
    (stage,) = list(step.callees())
    (layer,) = list(stage.callees())  # the 4 blocks are 4 calls of one function
    assert sum(op.callee is layer for op in stage.ops) == 4
    allreduces = [op for op in layer.ops if op.op_type == "MPIAllreduce"]
    assert len(allreduces) == 2  # attention and MLP
    assert all(len(op.inputs) == 4 for op in allreduces)
