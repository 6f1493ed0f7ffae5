"""The explicit padding of a convolution or pool (ONNX ``auto_pad`` resolved).

One place for a rule that the gradient rules and the PyTorch lowering both need: given a
static input shape, ``SAME_UPPER``/``SAME_LOWER`` pad so that the output has ``ceil(D /
stride)`` positions (the extra one at the end for ``SAME_UPPER``, at the start for
``SAME_LOWER``), ``VALID`` pads nothing, and ``NOTSET`` keeps the ``pads`` attribute.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["explicit_pads"]


def explicit_pads(spatial: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
                  dilations: Sequence[int], pads: Sequence[int] | None,
                  auto_pad: str = "NOTSET") -> list[int]:
    """Begin pads then end pads (``2 * len(spatial)`` integers) for input sizes
    ``spatial``."""
    n = len(spatial)
    if auto_pad == "VALID":
        return [0] * (2 * n)
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        return list(pads or [0] * (2 * n))
    out = [0] * (2 * n)
    for i, size in enumerate(spatial):
        positions = -(-size // strides[i])
        total = max((positions - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - size,
                    0)
        small = total // 2
        out[i], out[n + i] = ((small, total - small) if auto_pad == "SAME_UPPER"
                              else (total - small, small))
    return out
