"""The nine real models shipped in ``onnx/backend/test/data/light`` (opset 9 image
classifiers whose weights are ``ConstantOfShape`` nodes).

Every model imports (upgraded to opset 21) and type-propagates with every value typed, to
the shape of the shipped output, in well under a second. Executing them in numpy takes
about 1 to 20 s each (docs/conformance.md has the times measured by
scripts/conformance_table.py); the four slowest are marked ``slow`` (run
``pytest tests/importers -m slow``).
Outputs are compared with the ``_output_0.pb`` shipped beside each model, at ONNX's own
tolerances, and with onnxruntime on the original (opset 9) model.

Under their constant weights most of these models output a uniform 0.001 whatever the
input, so the same graphs also run with random weights and a random input against
onnxruntime (``light_random_weights``), where the output probabilities do spread.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import distir
from distir.analysis import execute, type_env
from distir.analysis.values import type_of
from distir.importers.conformance import (
    LIGHT_RTOL,
    assert_similar,
    light_expected,
    light_input,
    light_models,
    light_random_weights,
)
from distir.importers.onnx import import_onnx
from distir.ir.types import DType, TensorType

MODELS = light_models()
NAMES = [os.path.basename(p)[len("light_"):-len(".onnx")] for p in MODELS]
# The four slowest to execute in numpy (docs/conformance.md); the others take ~1-3 s each.
SLOW = {"densenet121", "inception_v1", "inception_v2", "vgg19"}
# With random weights, three of the fast ones by default (batch norm, residual sums,
# channel shuffles, LRN, Gemm), all with -m slow.
RANDOM_FAST = {"resnet50", "shufflenet", "bvlc_alexnet"}


def test_all_nine_models_are_found():
    assert sorted(NAMES) == ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2",
                             "resnet50", "shufflenet", "squeezenet", "vgg19", "zfnet512"]


@pytest.mark.parametrize("path", MODELS, ids=NAMES)
def test_imports_and_types_every_value(path):
    m = import_onnx(path)
    fn = m.entry
    free = [p for p in fn.params if p.name not in fn.initializers]
    assert len(free) == 1 and free[0].type.dtype is DType.Float32
    env = type_env(fn)
    for op in fn.ops:
        for v in op.outputs:
            assert isinstance(type_of(env[v]), TensorType), (op.op_type, v.name)
    (out,) = fn.returns
    expected = light_expected(path)
    assert type_of(env[out]) == TensorType(DType.Float32, expected.shape, 0)
    text = distir.dumps(m)
    assert distir.dumps(distir.parse(text)) == text


def _params(names, fast):
    return [pytest.param(p, id=n, marks=[] if n in fast else [pytest.mark.slow])
            for p, n in zip(MODELS, names, strict=True)]


@pytest.mark.parametrize("path", _params(NAMES, set(NAMES) - SLOW))
def test_executes_to_the_shipped_output_and_onnxruntime(path):
    import onnxruntime as ort
    name = os.path.basename(path)[len("light_"):-len(".onnx")]
    rtol = LIGHT_RTOL.get(name, 1e-3)
    m = import_onnx(path)
    x = light_input(m.entry.params[0].type.shape)
    (y,) = execute(m.entry, [x])
    assert_similar([y], [light_expected(path)], rtol=rtol, atol=1e-7)

    so = ort.SessionOptions()
    so.log_severity_level = 3  # the models carry an unused initializer ORT warns about
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    (ref,) = sess.run(None, {sess.get_inputs()[0].name: x})
    assert_similar([y], [ref], rtol=rtol, atol=1e-7)
    assert np.isfinite(y).all()


@pytest.mark.parametrize("path", _params(NAMES, RANDOM_FAST))
def test_random_weights_match_onnxruntime(path):
    import onnxruntime as ort
    model = light_random_weights(path, seed=0)
    m = import_onnx(model)
    shape = m.entry.params[0].type.shape
    x = np.random.default_rng(1).random(shape, dtype=np.float32)
    (y,) = execute(m.entry, [x])
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    (ref,) = sess.run(None, {sess.get_inputs()[0].name: x})
    # Not the uniform output of the constant weights: the probabilities spread by > 5 %.
    assert np.ptp(ref) > 0.05 * ref.mean()
    assert_similar([y], [ref], rtol=1e-3, atol=1e-7)
