"""``Col2Im`` (``nn.Fold``) in a model we did not write: a tiny HF MobileViTV2, whose
transformer blocks unfold the feature map into patches and fold them back. Exported by
dynamo it imports, and its training step, differentiated through the fold (a reshape, a
transpose and a reshape back: its patches tile the image), computes the sequential step's
updated weights under D, K, P and T."""

from __future__ import annotations

import numpy as np
import transformers  # noqa: F401 - the test of an HF model needs it

import distir
from distir.transforms import training_step
from tests.transforms.helpers import check_every_writer

CONFIGS = [(2, 1, 1, 1), (1, 1, 1, 2), (1, 1, 2, 2), (2, 2, 1, 1)]


def test_hf_mobilevitv2_imports_and_trains_distributed() -> None:
    from tests.zoo.export import exported
    from tests.zoo.models import MOBILEVITV2

    m = distir.import_onnx(exported(MOBILEVITV2, "dynamo").path,
                           dims=MOBILEVITV2.dims(batch=4))
    assert sum(op.op_type == "Col2Im" for op in m.entry.ops) == 3
    step = training_step(m.entry, loss="cross_entropy", optimizer="sgd")
    labels = np.random.default_rng(0).integers(0, 10, size=4).astype(np.int64)
    check_every_writer(step, [t.numpy() for t in MOBILEVITV2.inputs(4, 8)] + [labels],
                       CONFIGS, 1)
