"""Unit checks of the layout rules that tensor-parallel patterns rely on: a fused
projection unfolded into its parts, and a gather that picks one fused part."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import distir
from distir.transforms import analyze, dtp
from distir.transforms.layout import Layout, Reject, T, local_shape
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


def test_batch_and_heads_merged_in_one_axis() -> None:
    """``(B, H, S, d)`` viewed as ``(B·H, S, d)``: the merged axis holds the batch outside
    and the split heads inside (``"btH"``), and unfolds again; ``nn.MultiheadAttention``'s
    ``(S, B, H·d)`` as ``(S, B·H, d)`` likewise."""
    four = Layout(("b", T, None, None))
    merged = reshape_layout(four, (4, 4, 8, 8), (16, 8, 8))
    assert merged == Layout(("bt4", None, None))
    assert reshape_layout(merged, (16, 8, 8), (4, 4, 8, 8)) == four
    assert local_shape((16, 8, 8), merged, 2, 2) == (4, 8, 8)
    mha = reshape_layout(Layout((None, "b", T)), (8, 4, 32), (8, 16, 8))
    assert mha == Layout((None, "bt4", None))
    assert reshape_layout(mha, (8, 16, 8), (8, 4, 32)) == Layout((None, "b", T))
    with pytest.raises(Reject):  # the heads outside the batch: not a batch-major merge
        reshape_layout(Layout((T, "b", None)), (4, 4, 8), (16, 8))
    with pytest.raises(Reject):  # unfolded into other sizes than (B, H·k)
        reshape_layout(merged, (16, 8, 8), (8, 2, 8, 8))


def test_split_parts_fold_into_interleaved_groups() -> None:
    """``(3, d)`` with ``d`` split viewed as ``(3·d,)``: 3 interleaved groups (the gradient
    of a fused projection unfolded into its parts)."""
    got = reshape_layout(Layout((None, None, None, T)), (8, 4, 3, 32), (8, 4, 96))
    assert got == Layout((None, None, T), 3)


def test_split_merged_into_outer_axes_gives_interleaved_groups() -> None:
    """Sequence-first attention's ``(S, B·H, hd) -> (S·B, d)`` with ``B·H`` split: each
    device holds its block of ``B`` in each of the ``S`` runs, ``Shard(0, groups=S)``, and
    back again; a merge whose runs straddle the output axes is still refused."""
    rows = reshape_layout(Layout((None, T, None)), (3, 8, 2), (12, 4))
    assert rows == Layout((T, None), 3)
    assert reshape_layout(rows, (12, 4), (3, 8, 2)) == Layout((None, T, None))
    assert reshape_layout(rows, (12, 4), (3, 4, 4)) == Layout((None, T, None))
    assert reshape_layout(Layout((None, T, None)), (2, 4, 3), (4, 6)) == Layout((T, None), 2)
    with pytest.raises(Reject, match="merges split axis 1 into an outer axis"):
        reshape_layout(Layout((None, T)), (3, 4), (2, 6))  # a device's runs straddle rows
    with pytest.raises(Reject, match="interleaved groups"):
        reshape_layout(Layout((T, None), 3), (12, 4), (2, 24))


def _held(shape: tuple[int, ...], axis: int, groups: int, p: int, j: int) -> np.ndarray:
    """Which elements device ``j`` of ``p`` holds of a tensor split along ``axis`` in
    ``groups`` interleaved groups."""
    n = shape[axis] // (groups * p)
    mask = np.zeros(shape[axis], bool)
    for g in range(groups):
        start = g * n * p + j * n
        mask[start:start + n] = True
    return np.broadcast_to(mask.reshape([-1 if a == axis else 1 for a in range(len(shape))]),
                           shape)


def _views(shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Shapes with two adjacent axes merged or one axis cut in two."""
    out = [shape[:i] + (shape[i] * shape[i + 1],) + shape[i + 2:] for i in range(len(shape) - 1)]
    for i, n in enumerate(shape):
        out += [shape[:i] + (f, n // f) + shape[i + 1:] for f in range(2, n) if n % f == 0]
    return out


def test_reshape_layout_keeps_exactly_each_devices_elements() -> None:
    """Wherever ``reshape_layout`` places a split (on any degree that divides both the
    input's and the result's split axis in their groups), each device's elements, viewed
    as the result, are exactly those the result's layout gives it; where it refuses, some
    degree that divides the input's split gives a device elements no split of one result
    axis holds."""
    sizes = (1, 2, 3, 4, 6, 8, 12)
    for sa in itertools.product(sizes, repeat=3):
        for axis, groups in itertools.product(range(3), (1, 2, 3)):
            if sa[axis] % groups or sa[axis] // groups < 2:
                continue
            marks: list[str | None] = [None] * 3
            marks[axis] = T
            for so in _views(sa):
                try:
                    got: Layout | None = reshape_layout(Layout(tuple(marks), groups), sa, so)
                except Reject:
                    got = None
                degrees = [p for p in range(2, sa[axis] + 1) if sa[axis] % (groups * p) == 0]
                if got is None:
                    assert not degrees or any(_straddles(sa, so, axis, groups, p)
                                              for p in degrees), (sa, so, axis, groups)
                    continue
                y = got.marks.index(T)
                for p in degrees:
                    if so[y] % (got.groups * p):
                        continue  # the placement check refuses this degree
                    for j in range(p):
                        want = _held(so, y, got.groups, p, j)
                        assert (_held(sa, axis, groups, p, j).reshape(so) == want).all(), \
                            (sa, so, axis, groups, p, got)


def _straddles(sa: tuple[int, ...], so: tuple[int, ...], axis: int, groups: int,
               p: int) -> bool:
    """Whether no split of one axis of ``so`` (in any groups) holds device 0's elements."""
    mine = _held(sa, axis, groups, p, 0).reshape(so)
    for y, n in enumerate(so):
        for g in range(1, n + 1):
            if n % (g * p) == 0 and (_held(so, y, g, p, 0) == mine).all():
                return False
    return True
