"""``distir.import_torch`` and ``distir import --torch PACKAGE.MODULE:FACTORY --example``:
a PyTorch module exported with ``torch.onnx.export(dynamo=True)`` and imported, parameters
keeping their torch names and values, symbolic dimensions bound by ``dims``."""

from __future__ import annotations

import re
import sys
import uuid

import numpy as np
import pytest
import torch
from torch import nn

import distir
from distir.analysis import execute
from distir.cli import main
from distir.errors import ImportError_
from distir.importers.pytorch import parse_example


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.norm = nn.BatchNorm1d(8)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.norm(self.fc1(x))))


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    m = MLP()
    with torch.no_grad():
        m.norm.running_mean.uniform_(-0.5, 0.5)
        m.norm.running_var.uniform_(0.5, 2.0)
    return m.eval()


@pytest.fixture(scope="module")
def mlp_at_5():
    m = _mlp()
    return m, distir.import_torch(m, torch.randn(2, 4), dims={"batch": 5},
                                  dynamic=[{0: "batch"}])


def test_parameters_keep_torch_names_and_values(mlp_at_5):
    m, mod = mlp_at_5
    fn = mod.entry
    assert fn.params[0].name == "x"
    state = m.state_dict()
    for name in ("fc1.weight", "fc1.bias", "norm.weight", "norm.running_mean",
                 "norm.running_var", "fc2.weight"):
        # Not folded: batch norm stays an op, the linear weights are not transposed.
        np.testing.assert_array_equal(fn.initializers[name], state[name].numpy())
    assert any(op.op_type == "BatchNormalization" for op in fn.ops)


def test_dims_bind_the_symbolic_batch_and_execute_matches_torch(mlp_at_5):
    m, mod = mlp_at_5
    fn = mod.entry
    assert fn.params[0].type.shape == (5, 4)
    assert distir.infer_types(fn)[0].shape == (5, 3)
    x = torch.randn(5, 4)
    (y,) = execute(fn, [x.numpy()])
    with torch.no_grad():
        np.testing.assert_allclose(y, m(x).numpy(), rtol=1e-5, atol=1e-6)


def test_unbound_symbolic_dims_take_the_example_sizes():
    mod = distir.import_torch(_mlp(), (torch.randn(3, 4),), dynamic={"x": {0: "batch"}})
    assert mod.entry.params[0].type.shape == (3, 4)
    static = distir.import_torch(_mlp(), torch.randn(3, 4))
    assert static.entry.params[0].type.shape == (3, 4)


class _Raises(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("boom\nsecond line")


@pytest.mark.parametrize("call, message", [
    (lambda: distir.import_torch("model", torch.ones(2)), r"takes a torch.nn.Module, not str"),
    (lambda: distir.import_torch(_mlp(), [1, 2]), r"example input 0 is a int, not a tensor"),
    (lambda: distir.import_torch(_mlp(), torch.randn(2, 4), dims={"batch": 2}),
     r"dims names 'batch', which no symbolic dimension has"),
    (lambda: distir.import_torch(_mlp(), torch.randn(2, 4), dims={"batch": 0},
                                 dynamic=[{0: "batch"}]), r"positive integers"),
    (lambda: distir.import_torch(_mlp(), torch.randn(1, 4), dynamic=[{0: "batch"}]),
     r"size 1 on its symbolic axis 0 \('batch'\): give an example of size 2 or more"),
    (lambda: distir.import_torch(_mlp(), torch.randn(2, 4), dynamic=[{2: "batch"}]),
     r"dynamic axis 2 of input 'x' is not an axis"),
    (lambda: distir.import_torch(_Raises(), torch.randn(2, 4)),
     r"torch.onnx.export\(dynamo=True\) failed on _Raises: RuntimeError: boom$"),
])
def test_errors_are_one_line(call, message):
    with pytest.raises(ImportError_) as e:
        call()
    assert "\n" not in e.value.message
    assert re.search(message, e.value.message), e.value.message


def test_parse_example():
    assert parse_example("batch=2,3,32,32") == ("float32", (2, 3, 32, 32), {0: "batch"})
    assert parse_example("int64:batch=2,seq=8") == ("int64", (2, 8), {0: "batch", 1: "seq"})
    for bad in ("2,0", "2,,3", "int9:2", "1b=2"):
        with pytest.raises(ImportError_, match="--example"):
            parse_example(bad)


@pytest.fixture
def factory(tmp_path, monkeypatch):
    """A module ``zoo_factory_<id>`` in ``tmp_path`` (the current directory) whose ``make()``
    returns the MLP; yields its name."""
    name = f"zoo_factory_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(
        "from tests.importers.test_import_torch import _mlp\n\n"
        "def make():\n    return _mlp()\n\n"
        "def not_a_module():\n    return 3\n\n"
        "def fails():\n    raise ValueError('no weights here')\n")
    monkeypatch.chdir(tmp_path)
    yield name
    sys.modules.pop(name, None)


def test_cli_imports_a_factory_and_binds_dims(factory, tmp_path, capsys):
    out = tmp_path / "mlp.dir"
    assert main(["import", "--torch", f"{factory}:make", "--example", "batch=2,4",
                 "--dim", "batch=6", "-o", str(out)]) == 0
    assert capsys.readouterr().out == ""
    text = out.read_text()
    assert text.startswith(f"// Imported from torch {factory}:make by `distir import`")
    m = distir.load(out)
    assert m.entry.params[0].type.shape == (6, 4)
    np.testing.assert_array_equal(m.initializers["fc1.weight"],
                                  _mlp().fc1.weight.detach().numpy())
    x = np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32)
    (y,) = execute(m.entry, [x])
    with torch.no_grad():
        np.testing.assert_allclose(y, _mlp()(torch.from_numpy(x)).numpy(), rtol=1e-5,
                                   atol=1e-6)


EX = ["--example", "2,4"]


@pytest.mark.parametrize("argv, message", [
    (["--torch", "nocolon"], r"expected PACKAGE.MODULE:FACTORY"),
    (["--torch", "no_such_module_xyz:make", *EX],
     r"cannot import no_such_module_xyz: ModuleNotFoundError"),
    (["--torch", "{f}:missing", *EX], r"\{f\} has no attribute missing"),
    (["--torch", "{f}:not_a_module", *EX],
     r"not_a_module\(\) returned a int, not a torch.nn.Module"),
    (["--torch", "{f}:fails", *EX], r"fails\(\) failed: ValueError: no weights here"),
    (["--torch", "{f}:make"], r"give one --example SHAPE per forward\(\) argument"),
    (["--example", "2,4"], r"--example goes with --torch"),
    (["m.onnx", "--torch", "{f}:make", "--example", "2,4"], r"not both"),
    (["--torch", "{f}:make", "--example", "batch=2,4", "--dim", "batch=0"],
     r"--dim batch=0: expected NAME=N with N a positive integer"),
    ([], r"takes MODEL.onnx or --torch"),
])
def test_cli_errors_are_one_line(factory, capsys, argv, message):
    argv = [a.replace("{f}", factory) for a in argv]
    assert main(["import", *argv]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert re.search(message.replace(r"\{f\}", factory), err), err


class _FixedBatch(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.ones(2, 4)  # only batch 2 works: torch.export specializes it


def test_a_symbolic_dimension_the_model_fixes_is_a_one_line_export_error():
    with pytest.raises(ImportError_) as e:
        distir.import_torch(_FixedBatch(), torch.randn(2, 4), dynamic=[{0: "batch"}])
    msg = e.value.message
    assert "\n" not in msg
    assert msg.startswith("torch.onnx.export(dynamo=True) failed on _FixedBatch: ")
    assert "inferred a static shape of 2 for dimension inputs['x'].shape[0]" in msg, msg
