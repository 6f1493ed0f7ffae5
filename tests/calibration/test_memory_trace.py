"""Memory per op beside the liveness model (``calibration.memory_trace``): the backend's
memory clock, the model's bytes, the report, and a gloo run on CPU processes."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import distir
from calibration.memory_trace import COLUMNS, main, model_bytes, report
from distir.analysis.projection import project
from distir.backend.lowering import compile_program
from distir.backend.worker import draw_inputs

ROOT = Path(__file__).resolve().parents[2]
KIB = 1024

# Split's results are views of %a: while %p lives, all of %a's storage does, as the
# liveness model counts it (``memory.PARTS``; it once freed %a at the Split and counted
# %p at its own size).
VIEW = """func @main(%x: Tensor[Float32, (512, 256), 0]) {
  %a = Relu(%x)
  %p, %q = Split(%a, axis=0, num_outputs=2)
  %b = Neg(%x)
  %c = Relu(%p)
  return %b, %c
}"""


def _trace() -> tuple[list[tuple[int, int]], list[tuple[int, int, int]], list[dict]]:
    prog = project(distir.parse(VIEW).entry).programs[0]
    compiled = compile_program(prog, torch.device("cpu"))
    gen = torch.Generator().manual_seed(0)
    inputs = draw_inputs(prog.fn, torch.device("cpu"), gen)
    measured: list[tuple[int, int, int]] = []
    compiled.run(inputs, memory_clock=measured)
    model = model_bytes(prog.fn)
    rows = [{"rank": 0, "op": i, "op_type": op.op_type,
             "outputs": " ".join(str(v.name) for v in op.outputs), "model_during": m[0],
             "model_after": m[1], "measured_during": x[0], "measured_after": x[1],
             "reserved_after": x[2], "status": "ok"}
            for i, (op, m, x) in enumerate(zip(prog.fn.ops, model, measured))]
    return model, measured, rows


def test_a_part_keeps_its_base_as_the_model_counts() -> None:
    model, measured, rows = _trace()
    assert len(measured) == len(model) == 4
    x = 512 * KIB
    # The run and the model: x, then a; a's whole storage while its part p lives (q is
    # never used), b; then c, and a freed with p.
    assert model[0] == (2 * x, 2 * x)
    assert model[1] == (2 * x, 2 * x)
    assert model[3] == (3 * x + x // 2, 2 * x + x // 2)
    assert [m[1] for m in measured] == [m[1] for m in model]
    text = report(rows)
    assert "excess +0.00 GiB" in text


def test_report_reads_a_written_trace(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    _, _, rows = _trace()
    path = tmp_path / "t.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, COLUMNS)
        w.writeheader()
        w.writerows(rows)
    assert main(["report", str(path)]) == 0
    assert "rank 0: 4 ops" in capsys.readouterr().out
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    assert main(["report", str(bad)]) == 2
    assert "not a memory_trace file" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "none.csv")]) == 2
    assert "none.csv" in capsys.readouterr().err


@pytest.mark.slow
def test_gloo_run_traces_every_rank(tmp_path: Path) -> None:
    out = tmp_path / "m.csv"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    r = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
         "-m", "calibration.memory_trace", "measure", "--backend", "gloo",
         "--model", "mlp-2-16", "--dtype", "Float32", "--batch-size", "4",
         "--config", "1,1,2,2", "-o", str(out)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = list(csv.DictReader(open(out)))
    assert {x["rank"] for x in rows} == {"0", "1"}
    assert all(x["status"] == "ok" for x in rows)
    assert "rank 1:" in r.stdout


@pytest.mark.slow
def test_a_model_file_as_its_search_was_given(tmp_path: Path) -> None:
    """``--model FILE.onnx`` with ``--dim`` and ``--train``: the user's model's training
    step traced, as ``study explain`` rebuilds a searched row."""
    import torch

    model = tmp_path / "m.onnx"
    torch.onnx.export(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                          torch.nn.Linear(16, 4)),
                      (torch.randn(4, 8),), str(model), input_names=["x"],
                      dynamic_axes={"x": {0: "batch"}}, dynamo=False)
    out = tmp_path / "m.csv"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    r = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "1",
         "-m", "calibration.memory_trace", "measure", "--backend", "gloo",
         "--model", str(model), "--dim", "batch=4", "--train", "--optimizer", "adam",
         "--batch-size", "4", "--config", "1,1,1,1", "-o", str(out)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = list(csv.DictReader(open(out)))
    assert any(x["op_type"] == "AdamOptimizer" for x in rows)
    assert all(x["status"] == "ok" for x in rows)


def test_the_model_counts_a_reshape_as_its_storage() -> None:
    """``model_bytes`` is the simulator's model: a ``Reshape`` of ``a`` holds no bytes of
    its own, and ``a`` lives until the view's last use."""
    fn = project(distir.parse("""func @main(%x: Tensor[Float32, (512, 256), 0]) {
  %s = Constant(value=dense<Int64>[256, 512], device=0)
  %a = Relu(%x)
  %v = Reshape(%a, %s)
  %b = Neg(%v)
  return %b
}""").entry).programs[0].fn
    x = 512 * KIB
    model = model_bytes(fn)
    assert model[2] == (2 * x + 16, 2 * x)  # the view adds nothing; the shape dies
    assert model[3] == (3 * x, 2 * x)       # a (as v) dies at Neg
