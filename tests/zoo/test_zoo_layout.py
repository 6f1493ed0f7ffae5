"""The zoo's SegFormer (Hugging Face, small): its training step's depthwise convolutions read
a transposed token tensor reshaped to an image, and the simulator prices them as the
channels-last convolutions PyTorch runs (``distir.analysis.layout``), from both exporters'
graphs; its other convolutions (the patch embeddings of contiguous images) stay NCHW."""

from __future__ import annotations

import pytest
import transformers  # noqa: F401 - the zoo's models need it

import distir
from distir.analysis import layout
from distir.analysis.simulator import Simulator
from distir.transforms import training_step
from tests.zoo.models import BY_NAME, EXPORTERS


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_segformer_depthwise_convolutions_run_channels_last(exporter: str) -> None:
    from tests.zoo.export import exported

    spec = BY_NAME["segformer"]
    fn = distir.import_onnx(exported(spec, exporter).path, dims=spec.dims()).entry
    step = training_step(fn, loss="mse", optimizer="adam", lr=0.01)
    sim = Simulator("h200-sxm-graph")
    seen: list[tuple[str, int, object]] = []
    cost = sim._cost

    def spy(op, ins, outs, fmt=None):  # type: ignore[no-untyped-def]
        if op.op_type in layout.CONV_OPS:
            seen.append((op.op_type, int(op.attrs.get("group", 1) or 1),
                         None if fmt is None else dict(fmt)))
        return cost(op, ins, outs, fmt)

    sim._cost = spy  # type: ignore[method-assign]
    assert sim.simulate_function(step).latency_s > 0
    depthwise = [f for kind, g, f in seen if g > 1]
    dense = [f for kind, g, f in seen if g == 1]
    assert depthwise and all(f is not None and f[layout.MEMORY_FORMAT] == "channels_last"
                              for f in depthwise)
    assert {kind for kind, g, _ in seen if g > 1} == {"Conv", "ConvGrad"}
    assert any(f is None for f in dense)  # the first patch embedding: the input image
