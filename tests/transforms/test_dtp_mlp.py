"""Differential tests of D/T/P/K on the MLP training step: every configuration of the grid,
both schedules, against the sequential step run by the reference executor."""

from __future__ import annotations

import re

import numpy as np
import pytest

import distir
from distir.transforms import dtp, tower
from tests.transforms.helpers import cfg_id, check_equivalent, grid, small_mlp

CONFIGS = [c + (s,) for c in grid() for s in ("gpipe", "1f1b")]


@pytest.mark.parametrize("cfg", CONFIGS, ids=cfg_id)
def test_mlp_matches_sequential(cfg: tuple) -> None:
    dp, tp, pp, k, schedule = cfg
    check_equivalent(small_mlp(8 * dp * k), (dp, tp, pp, k), schedule)


def test_self_contained_type_checks_and_keeps_the_signature() -> None:
    fn, an, ins, want = small_mlp(16)
    sc = dtp(an, 2, 2, 2, 4, self_contained=True)
    assert [p.name for p in sc.params] == [p.name for p in fn.params]
    assert [p.type for p in sc.params] == [p.type for p in fn.params]
    assert distir.infer_types(sc) == distir.infer_types(fn)
    for g, w in zip(distir.execute(sc, list(ins)), want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_default_variant_returns_every_updated_shard() -> None:
    fn, an, ins, want = small_mlp(16)
    step = tower.dtp(an, 2, 2, 2, 4)
    types = distir.infer_types(step)
    # 4 weights, each on dp·tp = 4 devices, shapes of the placed parameters
    assert len(types) == 16
    assert [str(p.type) for p in step.params[:16]] == [str(t) for t in types]
    assert {p.name for p in step.params[:4]} == {"w0_dp0_tp0", "w0_dp0_tp1", "w0_dp1_tp0",
                                                 "w0_dp1_tp1"}


def test_odd_layer_count_keeps_the_last_layer_whole() -> None:
    """Column/row pairs: with 3 layers w0 is column-parallel, w1 row-parallel, w2 whole."""
    fn = distir.models.mlp(batch_size=8, input_dim=4, hidden_dim=8, output_dim=4,
                           num_layers=3)
    step = tower.dtp(fn, tp=2)
    shapes = {p.name: p.type.shape for p in step.params}
    assert shapes["w0_tp0"] == (4, 4) and shapes["w1_tp0"] == (4, 8)
    assert shapes["w2_tp0"] == (8, 4)
    ins = distir.analysis.random_inputs(fn)
    for g, w in zip(distir.execute(tower.dtp(fn, tp=2, self_contained=True), ins),
                    distir.execute(fn, ins), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("cfg", [(2, 1, 1, 1), (2, 2, 1, 1), (2, 1, 2, 4), (2, 2, 2, 2)],
                         ids=cfg_id)
def test_each_gradient_is_reduced_right_after_its_last_part(cfg: tuple) -> None:
    """With dp > 1 each stage's last backward unit is written out in @main, replicas
    interleaved, and a gradient's allreduce over replicas comes right after the op that
    completes it (so it overlaps the rest of the backward), before the next layer's ops."""
    dp, tp, pp, k = cfg
    fn = distir.models.mlp(batch_size=16, input_dim=4, hidden_dim=8, output_dim=4,
                           num_layers=4)
    prog = tower.dtp(fn, dp=dp, tp=tp, pp=pp, microbatches=k, layer_functions=False)
    ops = prog.ops
    made = {v: i for i, op in enumerate(ops) for v in op.outputs}
    replica_sums = [i for i, op in enumerate(ops) if op.op_type == "MPIAllreduce"
                    and len({re.search(r"_dp\d+", v.name or "")[0]  # type: ignore[index]
                             for v in op.outputs}) == dp]
    assert len(replica_sums) == 4 * tp
    for i in replica_sums:
        last = max(made[v] for v in ops[i].inputs if v in made)
        between = ops[last + 1:i]  # at most the other replicas' parts of the same op
        assert all(op.op_type == ops[last].op_type for op in between), ops[i]
    # The first gradient is reduced before the backward of the layers below it has run.
    first = replica_sums[0]
    assert any(op.op_type == "MatMulGrad" for op in ops[first:])
    # No replica-sum is left to the end, after the updates started (the updates are
    # one @update function, called once per replica).
    updates = [i for i, op in enumerate(ops) if op.op_type == "SGDOptimizer" or (
        op.callee is not None and op.callee.name == "update")]
    assert len(updates) == dp
    assert max(replica_sums) < min(updates)
