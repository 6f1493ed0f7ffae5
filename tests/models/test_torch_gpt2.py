"""The torch GPT-2, exported by both torch exporters, imports into DistIR and computes what
onnxruntime and torch compute."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch

import distir
from distir.ir import DType, TensorType
from distir.models import GPT2Config
from distir.models.torch_gpt2 import GPT2, export_gpt2_onnx  # noqa: E402

CFG = GPT2Config(n_layer=2, d_model=64, n_head=4, vocab_size=100, seq_len=16, batch_size=2)
EXPORTERS = ["torchscript", "dynamo"]


@pytest.fixture(scope="module")
def model() -> GPT2:
    return GPT2(CFG, seed=0).eval()


def _export(model: GPT2, path: Path, exporter: str, dynamic: bool) -> Path:
    if exporter == "dynamo":
        import onnxscript  # noqa: F401 - the test needs it
    export_gpt2_onnx(model, path, dynamo=exporter == "dynamo", dynamic=dynamic)
    return path


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("exporter", EXPORTERS)
def test_exported_gpt2_imports_and_matches(model: GPT2, tmp_path: Path, exporter: str,
                                           dynamic: bool) -> None:
    path = _export(model, tmp_path / "gpt2.onnx", exporter, dynamic)
    # Dynamic exports are bound to other sizes than the example input's.
    batch, seq = (3, 11) if dynamic else (CFG.batch_size, CFG.seq_len)
    m = distir.import_onnx(str(path), dims={"batch": batch, "seq": seq} if dynamic else None)
    fn = m.entry
    distir.verify(fn)
    free = [p for p in fn.params if p.name not in fn.initializers]
    assert [p.name for p in free] == ["input_ids"]
    assert distir.infer_types(fn) == (TensorType(DType.Float32, (batch, seq, 100), 0),)

    ids = np.random.default_rng(0).integers(0, CFG.vocab_size, (batch, seq))
    (got,) = distir.execute(fn, [ids])
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (want_ort,) = sess.run(None, {"input_ids": ids})
    with torch.no_grad():
        want_torch = model(torch.from_numpy(ids)).numpy()
    np.testing.assert_allclose(got, want_ort, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got, want_torch, rtol=1e-4, atol=1e-5)
    if dynamic:  # the exported graph computes shapes at run time, and DistIR typed them
        ops = Counter(op.op_type for op in fn.ops)
        assert ops["Shape"] > 0 and ops["Reshape"] > 0


def test_torch_gpt2_is_float32_only() -> None:
    from distir.errors import ConfigError

    with pytest.raises(ConfigError, match="Float32 only"):
        GPT2(GPT2Config(1, 8, 2, 10, 4, 1, dtype=DType.Float16))


def test_models_package_does_not_import_torch_or_onnx() -> None:
    code = ("import sys, distir, distir.models; "
            "print(sorted(m for m in ('torch', 'onnx') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"
