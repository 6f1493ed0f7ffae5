"""Unit checks of the layout rules that tensor-parallel patterns rely on: a fused
projection unfolded into its parts, and a gather that picks one fused part."""

from __future__ import annotations

import pytest

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
