"""The grid search's functions of every zoo model (both torch exporters, inference and
training step) are analysed as the imported function is: the search leaves the large
initializers out of the functions it ships to its workers, and the transform must still
take those parameters for weights (once, it took them for batch inputs and refused every
D and K of HF GPT-2's inference program)."""

from __future__ import annotations

import onnx  # noqa: F401 - the test needs it
import pytest
import transformers  # noqa: F401 - the test needs it

from distir.cli._train import TrainOptions
from distir.transforms import analyze
from grid_search import workload
from tests.transforms.zoo_models import BATCH, zoo_analysis
from tests.zoo.export import exported
from tests.zoo.models import BY_NAME, SPECS

TRAIN = TrainOptions("mse", "sgd", 0.1)


def _roles(an) -> tuple:  # noqa: ANN001 - an Analysis
    sh = an.sharding
    return (sorted(str(p.name) for p in sh.data), sh.batch_size, sh.batch_error)


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
@pytest.mark.parametrize("name", [s.name for s in SPECS])
def test_the_search_analyses_a_zoo_model_as_the_transform_does(name: str, exporter: str,
                                                              monkeypatch) -> None:
    import grid_search.models

    # The zoo's models are small: leave out what a full-size model's search would.
    monkeypatch.setattr(grid_search.models, "KEEP_ELEMENTS", 64)
    m, direct = zoo_analysis(name, exporter)
    spec = BY_NAME[name]
    path = exported(spec, exporter).path
    w = workload(path, dims=spec.dims(batch=BATCH))
    assert w.source is not None and w.source.weights  # large weights were left out
    assert _roles(w.analyze(BATCH)) == _roles(direct)
    t = workload(path, dims=spec.dims(batch=BATCH), train=TRAIN)
    from distir.cli._train import train as make_step

    full = make_step(m.entry, TRAIN, path)
    assert _roles(t.analyze(BATCH)) == _roles(analyze(full))
