"""``distir run``: local workers and torchrun ranks, JSON output, one-line errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch  # noqa: F401 - the test needs it

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DP2 = os.path.join(ROOT, "examples", "mlp_step_dp2.dir")


def distir_cmd(*args: str, env: dict[str, str] | None = None,
               ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "distir", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=180, env=env)


def test_run_json_and_saved_outputs(tmp_path: object) -> None:
    import numpy as np

    import distir
    from distir.analysis import execute, random_inputs

    fn = distir.load(DP2).entry
    ins = random_inputs(fn, seed=4)
    paths = []
    for i, a in enumerate(ins):
        paths.append(os.path.join(str(tmp_path), f"in{i}.npy"))
        np.save(paths[-1], a)
    out_dir = os.path.join(str(tmp_path), "out")
    r = distir_cmd("run", DP2, "--json", "--steps", "2", "--warmup", "0", "--backend", "gloo",
                   "--inputs", *paths, "--out", out_dir)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["status"] == "ok" and doc["world_size"] == 2 and len(doc["step_times_s"]) == 2
    assert doc["step_latency_s"] > 0 and len(doc["output_files"]) == 3
    for path, want in zip(doc["output_files"], execute(fn, ins)):
        np.testing.assert_allclose(np.load(path), want, rtol=1e-4, atol=1e-4)


def test_host_cost_on_cpu_ranks_says_it_measured_nothing() -> None:
    r = distir_cmd("run", DP2, "--json", "--steps", "1", "--warmup", "0", "--backend", "gloo",
                   "--host-cost")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["host_cost_s"] == [] and doc["host_share"] is None
    assert "--host-cost measured nothing" in r.stderr and "CPU ranks" in r.stderr


def test_run_errors_are_one_line(tmp_path: object) -> None:
    r = distir_cmd("run", os.path.join(str(tmp_path), "missing.dir"))
    assert r.returncode == 1 and r.stderr.strip().count("\n") == 0
    assert "no such file" in r.stderr
    r = distir_cmd("run", DP2, "--memory-limit", "lots")
    assert r.returncode == 2 and "is not a size" in r.stderr


@pytest.mark.skipif(shutil.which("torchrun", path=os.path.dirname(sys.executable)) is None,
                    reason="torchrun is not installed")
def test_torchrun_ranks() -> None:
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = subprocess.run([torchrun, "--nproc-per-node", "2", "--master-port", "29655", "-m",
                        "distir", "run", DP2, "--json", "--steps", "2", "--warmup", "1",
                        "--memory-limit", "20KiB"],
                       capture_output=True, text=True, cwd=ROOT, timeout=180, env=env)
    # Only rank 0 prints; the cap makes it an out-of-memory run (exit status 1), recorded.
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stdout + r.stderr
    doc = json.loads(lines[0])
    assert doc["world_size"] == 2 and doc["status"] == "oom" and doc["oom_ranks"] == [0, 1]


def test_run_names_slowed_gpus_and_reports_clocks(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """What the GPUs' clocks did (``distir.backend.clocks``): a slowed run is named on
    standard error, and ``--json`` carries the clocks; none of it without a busy sample."""
    import distir.backend.clocks as clocks
    from distir.cli import main

    report = clocks.summarize([[(1410, 1980, 0x40)] * 3])

    class Slowed:
        def __init__(self, devices: object) -> None:
            self.report = clocks.ClockReport()

        def __enter__(self) -> Slowed:
            return self

        def __exit__(self, *exc: object) -> None:
            self.report = report

    monkeypatch.setattr(clocks, "ClockSampler", Slowed)
    argv = ["run", DP2, "--json", "--steps", "1", "--warmup", "0", "--backend", "gloo"]
    assert main(argv) == 0
    out = capsys.readouterr()
    assert "measured on slowed GPUs (1410 of 1980 MHz, hw_thermal)" in out.err
    doc = json.loads(out.out)
    assert doc["clocks"] == {"busy_sm_clock_mhz": 1410, "max_sm_clock_mhz": 1980,
                             "events": ["hw_thermal"], "slowed": True, "samples": 3}
    report = clocks.ClockReport()  # nothing read: nothing said
    assert main(argv) == 0
    out = capsys.readouterr()
    assert "slowed" not in out.err and "clocks" not in json.loads(out.out)


def test_visible_gpus_follow_cuda_visible_devices() -> None:
    from distir.backend.clocks import visible_gpus

    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "0,3"}) == 2
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == 0
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}) == 0
