"""The host dispatch benchmark (``calibration.bench_dispatch``): the backend's host clock,
the fit, the profile it writes, and a gloo run on CPU processes."""

from __future__ import annotations

import csv
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from calibration.bench_dispatch import fit_table, main
from distir.analysis.hardware import load_hardware
from distir.analysis.projection import project
from distir.backend.lowering import compile_program
from distir.backend.worker import random_tensor
from distir.models import mlp

ROOT = Path(__file__).resolve().parents[2]


def test_host_clock_ticks_once_per_op_and_at_the_end() -> None:
    fn = mlp(batch_size=4, input_dim=8, hidden_dim=8, output_dim=4, num_layers=2)
    prog = project(fn).programs[0]
    compiled = compile_program(prog, torch.device("cpu"))
    gen = torch.Generator().manual_seed(0)
    inputs = [random_tensor(p.type, torch.device("cpu"), gen) for p in prog.fn.params]
    clock: list[float] = []
    a = compiled.run(inputs, host_clock=clock)
    assert len(clock) == len(compiled.steps) + 1
    assert clock == sorted(clock)
    b = compiled.run(inputs)  # the clock changes nothing else
    assert all(torch.equal(x, y) for x, y in zip(a, b))


def _rows(*items: tuple[str, float]) -> list[dict[str, str]]:
    return [{"op_type": t, "host_s": str(s)} for t, s in items]


def test_fit_takes_means_and_folds_receives_into_sends() -> None:
    t = fit_table(_rows(("Add", 1e-5), ("Add", 3e-5), ("Send", 4e-5), ("Recv", 6e-5),
                        ("MatMul", 2e-5)))
    assert t["Add"] == pytest.approx(2e-5)
    assert t["Send"] == pytest.approx(5e-5) and "Recv" not in t
    assert t["*"] == pytest.approx(3.2e-5)


def test_fit_writes_a_profile_derived_from_its_base(tmp_path: Path) -> None:
    data = tmp_path / "d.csv"
    with open(data, "w", newline="") as f:
        w = csv.DictWriter(f, ["program", "rank", "op", "op_type", "comm", "host_s"])
        w.writeheader()
        for i, (t, s) in enumerate([("Add", 1e-5), ("Add", 3e-5), ("MatMul", 5e-5)]):
            w.writerow({"program": "p", "rank": 0, "op": i, "op_type": t, "comm": 0,
                        "host_s": s})
    out = tmp_path / "prof" / "mine.json"
    out.parent.mkdir()
    assert main(["fit", str(data), "--profile", "h100-sxm", "-o", str(out)]) == 0
    hw = load_hardware(str(out))
    assert hw.name == "h100-sxm-host" and hw.models_host
    assert hw.host_seconds("Add") == pytest.approx(2e-5)
    assert hw.host_seconds("Gemm") == pytest.approx(3e-5)  # the mean over every op
    base = load_hardware("h100-sxm")
    assert hw.memory_bytes == base.memory_bytes and hw.fits == base.fits
    # A base given as a path is written relative to the new profile's folder.
    out2 = tmp_path / "prof" / "other.json"
    src = ROOT / "calibration" / "profiles" / "h100-sxm-datasheet.json"
    assert main(["fit", str(data), "--profile", str(src), "--name", "x",
                 "-o", str(out2)]) == 0
    assert load_hardware(str(out2)).peak("Float16") == load_hardware(str(src)).peak("Float16")
    # gzipped measurements (as results folders keep them) are read the same
    zipped = tmp_path / "d.csv.gz"
    zipped.write_bytes(gzip.compress(data.read_bytes()))
    out3 = tmp_path / "prof" / "z.json"
    assert main(["fit", str(zipped), "--profile", "h100-sxm", "-o", str(out3)]) == 0
    assert load_hardware(str(out3)).host_seconds("Add") == pytest.approx(2e-5)
    # a gzipped base profile is written relative to the new profile too
    gz_base = tmp_path / "bases" / "base.json.gz"
    gz_base.parent.mkdir()
    gz_base.write_bytes(gzip.compress(src.read_bytes()))
    out4 = tmp_path / "prof" / "g.json"
    assert main(["fit", str(data), "--profile", str(gz_base), "-o", str(out4)]) == 0
    assert json.loads(out4.read_text())["base"] == "../bases/base.json.gz"
    assert load_hardware(str(out4)).peak("Float16") == load_hardware(str(src)).peak("Float16")


@pytest.mark.slow
def test_gloo_run_measures_every_op_of_every_rank(tmp_path: Path) -> None:
    out = tmp_path / "d.csv"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    r = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
         "-m", "calibration.bench_dispatch", "measure", "--backend", "gloo",
         "--workloads", "mlp-2-16", "--max-devices", "2", "--max-microbatches", "2",
         "--steps", "2", "--warmup", "1", "-o", str(out)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = list(csv.DictReader(open(out)))
    programs = {x["program"] for x in rows}
    assert "mlp-2-16 b4 D2 T1 P1 K1" in programs and len(programs) >= 4
    assert {x["rank"] for x in rows} == {"0", "1"}
    assert all(float(x["host_s"]) > 0 for x in rows)
    assert any(x["op_type"] == "MPIAllreduce" for x in rows)


def test_fit_refuses_bad_input_in_one_line(tmp_path: Path,
                                           capsys: pytest.CaptureFixture) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    out = str(tmp_path / "o.json")
    assert main(["fit", str(bad), "--profile", "h100-sxm", "-o", out]) == 2
    assert "not a bench_dispatch measurement file" in capsys.readouterr().err
    assert main(["fit", str(tmp_path / "none.csv"), "--profile", "h100-sxm", "-o", out]) == 2
    assert "none.csv" in capsys.readouterr().err
    notgz = tmp_path / "plain.csv.gz"
    notgz.write_text("program,rank\n")
    cut = tmp_path / "cut.csv.gz"
    cut.write_bytes(gzip.compress(b"program,rank,op,op_type,comm,host_s\n" * 50)[:40])
    for f in (notgz, cut):
        capsys.readouterr()
        assert main(["fit", str(f), "--profile", "h100-sxm", "-o", out]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"error: {f}: ") and "None" not in err[0]
    good = tmp_path / "g.csv"
    good.write_text("op_type,host_s\nAdd,1e-5\n")
    assert main(["fit", str(good), "--profile", "no-such-profile", "-o", out]) == 2
    err = capsys.readouterr().err
    assert "unknown hardware profile" in err and len(err.strip().splitlines()) == 1
    assert not Path(out).exists()
