"""``explicit_pads``: ONNX's auto_pad resolved against torch's own "same" padding."""

from __future__ import annotations

import pytest
import torch

from distir.ir.padding import explicit_pads


@pytest.mark.parametrize("size,kernel,stride,dil", [(7, 3, 1, 1), (8, 3, 2, 1), (9, 4, 2, 1),
                                                    (10, 3, 3, 2), (5, 5, 1, 1)])
def test_same_upper_gives_ceil_positions(size, kernel, stride, dil) -> None:
    begin, end = explicit_pads([size], [kernel], [stride], [dil], None, "SAME_UPPER")
    out = (size + begin + end - dil * (kernel - 1) - 1) // stride + 1
    assert out == -(-size // stride)
    assert end - begin in (0, 1)  # the extra one at the end
    lo_begin, lo_end = explicit_pads([size], [kernel], [stride], [dil], None, "SAME_LOWER")
    assert (lo_begin, lo_end) == (end, begin)
    if stride == 1:  # torch's padding="same" agrees where it is defined
        x = torch.randn(1, 1, size)
        w = torch.randn(1, 1, kernel)
        same = torch.nn.functional.conv1d(x, w, padding="same", dilation=dil)
        ours = torch.nn.functional.conv1d(torch.nn.functional.pad(x, (begin, end)), w,
                                          dilation=dil)
        torch.testing.assert_close(ours, same)


def test_valid_and_notset() -> None:
    assert explicit_pads([5, 5], [3, 3], [1, 1], [1, 1], [1, 2, 3, 4], "VALID") == [0] * 4
    assert explicit_pads([5, 5], [3, 3], [1, 1], [1, 1], [1, 2, 3, 4]) == [1, 2, 3, 4]
    assert explicit_pads([5, 5], [3, 3], [1, 1], [1, 1], None) == [0] * 4
