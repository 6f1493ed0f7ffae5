"""Unit checks of the layout rules that tensor-parallel patterns rely on: a fused
projection unfolded into its parts, and a gather that picks one fused part."""

from __future__ import annotations

import numpy as np
import pytest

import distir
from distir.transforms import analyze, dtp
from distir.transforms.layout import Layout, Reject, T
from distir.transforms.layout_rules import apply_rule
from distir.transforms.layout_shape_rules import reshape_layout


def test_grouped_axis_unfolded_into_its_groups() -> None:
    """(B, 3·d) split in 3 interleaved groups viewed as (B, 3, d): the split is on d."""
    got = reshape_layout(Layout((None, T), 3), (4, 24), (4, 3, 8))
    assert got == Layout((None, None, T))
    with pytest.raises(Reject):  # 4 groups do not match the 3 parts
        reshape_layout(Layout((None, T), 4), (4, 24), (4, 3, 8))


def test_gather_of_a_fused_part_asks_for_groups() -> None:
    with pytest.raises(Reject) as e:
        apply_rule("Gather", (Layout((T, None)), Layout(())), ((3, 8), ()), ((8,),),
                   {"axis": 0}, lambda i: None)
    assert e.value.groups == 3
    got = apply_rule("Gather", (Layout((None, T)), Layout(())), ((3, 8), ()), ((8,),),
                     {"axis": 0}, lambda i: None)
    assert got == ((Layout((T,)), ""),)


def _gpt2(d_model: int, n_head: int) -> distir.Function:
    return distir.models.gpt2(n_layer=2, d_model=d_model, n_head=n_head, vocab_size=11,
                              seq_len=4, batch_size=2)


def _split(fn: distir.Function, tp: int) -> set[str]:
    sh = analyze(fn).sharding.for_tp(tp)
    return {p.name for p in fn.params if T in sh.layout[p].marks}


FALLBACK = [
    # hidden 6: tp=4 divides no layer; every weight stays whole
    (lambda: distir.models.mlp(batch_size=8, input_dim=4, hidden_dim=6, output_dim=4,
                               num_layers=4), 4, 0),
    # 2 heads: the attention stays whole, the MLPs (d_ff 64: weights and bias) split
    (lambda: _gpt2(16, 2), 4, 6),
    # c_attn (12, 36) holds 3 projections of 12, which 8 does not divide; d_ff 48 it does
    (lambda: _gpt2(12, 2), 8, 6),
    # 3 divides d_ff 48 (the MLPs split), not the 2 heads
    (lambda: _gpt2(12, 2), 3, 6),
]


@pytest.mark.parametrize("case", range(len(FALLBACK)))
def test_tp_that_does_not_divide_a_pattern_keeps_it_whole(case: int) -> None:
    """A pattern whose split axis ``tp`` does not divide falls back to whole weights (it
    used to refuse the configuration); the others still split, and the program computes
    the sequential results."""
    make, tp, n_split = FALLBACK[case]
    fn = make()
    assert _split(fn, 2)  # every pattern splits at tp=2
    assert len(_split(fn, tp)) == n_split
    rng = np.random.default_rng(0)
    ins = [rng.integers(0, 11, size=p.type.shape).astype(np.int64)  # type: ignore[union-attr]
           if p.type.dtype.name.startswith("Int") else  # type: ignore[union-attr]
           rng.standard_normal(p.type.shape).astype(np.float32)  # type: ignore[union-attr]
           for p in fn.params]
    sc = dtp(fn, dp=2 if tp < 8 else 1, tp=tp, self_contained=True)
    got = distir.execute(sc, ins, check_types=False)
    for g, w in zip(got, distir.execute(fn, ins), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
