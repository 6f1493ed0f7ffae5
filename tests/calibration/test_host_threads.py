"""``calibration.host_threads``: per-thread CPU time, and a gloo run on CPU processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from calibration.host_threads import thread_cpu

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux's /proc")
def test_thread_cpu_names_each_busy_thread() -> None:
    spun = threading.Event()
    done = threading.Event()

    def spin() -> None:
        stop = time.thread_time() + 0.3  # CPU time: a loaded machine stretches wall time
        while time.thread_time() < stop:
            pass
        spun.set()
        done.wait()  # alive while measured: an ended thread leaves /proc/self/task

    before = thread_cpu()
    t = threading.Thread(target=spin, name="spinner")
    t.start()
    spun.wait()
    after = thread_cpu()
    done.set()
    t.join()
    # (Python names the OS thread after the Thread on Linux from 3.12 on.)
    assert after.get("spinner", 0.0) >= 0.2 or \
        sum(after.values()) - sum(before.values()) >= 0.2


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux's /proc")
def test_gloo_run_writes_a_line_per_configuration_and_rank(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    r = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
         "-m", "calibration.host_threads", "--backend", "gloo", "--workload", "mlp-2-16",
         "--dtype", "Float32", "--batch-size", "4", "--configs", "2,1,1,1", "1,1,2,2",
         "--steps", "2", "--warmup", "1", "--env", "plain", "-o", str(out)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert sorted((x["config"], x["rank"]) for x in rows) == [
        ("D1 T1 P2 K2", 0), ("D1 T1 P2 K2", 1), ("D2 T1 P1 K1", 0), ("D2 T1 P1 K1", 1)]
    for x in rows:
        assert x["env"] == "plain" and x["ops"] > 0
        assert len(x["step_s"]) == len(x["step_plain_s"]) == len(x["host_busy_s"]) == 2
        assert all(0 < b <= s for b, s in zip(x["host_busy_s"], x["step_s"]))
        assert x["host_median_sum_s"] > 0


@pytest.mark.parametrize("args, says", [
    (["--configs", "4,1,1"], "is not D,T,P,K"),
    (["--configs", "4,1,1,1", "--steps", "0"], "--steps must be at least 1"),
    (["--configs", "4,1,1,1", "--isolated", "2"], "--isolated N needs --per-op"),
])
def test_bad_arguments_are_one_line(args: list[str], says: str, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    from calibration.host_threads import main

    with pytest.raises(SystemExit) as e:
        main([*args, "-o", str(tmp_path / "t.jsonl")])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert says in err[-1] and not (tmp_path / "t.jsonl").exists()
