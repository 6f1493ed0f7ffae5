"""The zoo's known failures: each is one stage of one (model, exporter) pair, the text its
one-line error must contain, and the reason (which docs/zoo.md states).

A test asserts each of these fails exactly so; when one is fixed, that test fails until
its entry is removed here, so the list cannot go stale.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Known:
    stage: str
    match: str
    reason: str


KNOWN: dict[tuple[str, str], Known] = {
    ("transformer_encoder", "torchscript"): Known(
        "rebind", "cannot reshape (5, 3, 32) (480 elements) to (8, 12, 8)",
        "the TorchScript exporter records `nn.MultiheadAttention`'s sequence length (8) as a "
        "constant, so the graph holds only for seq=8: onnxruntime fails the same way at "
        "other sizes"),
}
"""(model, exporter) -> its known failure."""
