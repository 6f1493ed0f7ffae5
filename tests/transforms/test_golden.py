"""Golden printed IR of two distributed programs, reviewed for readability, as ``dtp``
(the spmd passes) writes them and as the builder tower wrote them (``tower_*``):

- ``mlp_2_2_2_4.dir``: a 4-layer MLP training step on 2 replicas × 2 stages × 2 ranks with
  4 microbatches per replica (1F1B);
- ``gpt2_1_2_2_2.dir``: a 2-layer GPT-2 inference step on 2 stages × 2 ranks with 2
  microbatches.

Regenerate with ``DISTIR_UPDATE_GOLDEN=1 pytest tests/transforms/test_golden.py`` and review
the diff.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest

import distir
from distir.transforms import dtp, tower

GOLDEN = Path(__file__).parent / "golden"


def _mlp(transform: Callable[..., distir.Function]) -> distir.Function:
    fn = distir.models.mlp(batch_size=16, input_dim=8, hidden_dim=16, output_dim=8,
                           num_layers=4)
    return transform(fn, dp=2, tp=2, pp=2, microbatches=4, schedule="1f1b")


def _gpt2(transform: Callable[..., distir.Function]) -> distir.Function:
    from distir.models.gpt2 import GPT2Config

    cfg = GPT2Config(n_layer=2, d_model=16, n_head=4, vocab_size=32, seq_len=4,
                     batch_size=4)
    return transform(cfg.build(), dp=1, tp=2, pp=2, microbatches=2)


CASES = {f"{prefix}{name}": partial(build, transform)
         for prefix, transform in (("", dtp), ("tower_", tower.dtp))
         for name, build in (("mlp_2_2_2_4.dir", _mlp), ("gpt2_1_2_2_2.dir", _gpt2))}


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name: str) -> None:
    text = distir.dumps(CASES[name]())
    path = GOLDEN / name
    if os.environ.get("DISTIR_UPDATE_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8"), \
        f"{name} changed: rerun with DISTIR_UPDATE_GOLDEN=1 and review the diff"


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_parses_and_type_checks(name: str) -> None:
    text = (GOLDEN / name).read_text(encoding="utf-8")
    m = distir.parse(text, filename=name)
    assert distir.dumps(m) == text
    distir.infer_types(m.entry)
