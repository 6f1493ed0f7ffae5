"""Hung collectives, dead workers and interrupts: every run ends with a clear message and
no worker process outlives it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch  # noqa: F401 - the test needs it

import distir  # noqa: E402
from distir.analysis.projection import Projection, project  # noqa: E402
from distir.backend import Session  # noqa: E402
from distir.backend.lowering import SimulatedOOM, is_oom  # noqa: E402
from distir.errors import BackendError  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ONE_ALLREDUCE = """
func @main(%x: Tensor[Float32, (4,), 0], %y: Tensor[Float32, (4,), 1]) {
  %a, %b = MPIAllreduce(%x, %y)
  return %a
}
"""

TWO_ALLREDUCES = """
func @main(%x: Tensor[Float32, (4,), 0], %y: Tensor[Float32, (4,), 1]) {
  %a, %b = MPIAllreduce(%x, %y)
  %c, %d = MPIAllreduce(%a, %b)
  return %c
}
"""


def hanging() -> Projection:
    """A projection whose rank 1 never joins rank 0's all-reduce."""
    proj = project(distir.parse(ONE_ALLREDUCE).entry)
    proj.programs[1].fn.ops = []
    return proj


def hanging_later() -> Projection:
    """A projection whose rank 1 joins the first all-reduce but not the second."""
    proj = project(distir.parse(TWO_ALLREDUCES).entry)
    proj.programs[1].fn.ops = proj.programs[1].fn.ops[:1]
    return proj


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for our purposes
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


def all_gone(pids: list[int], within: float = 10.0) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


def test_watchdog_ends_a_hang_and_kills_the_workers() -> None:
    s = Session(2, "gloo", timeout_s=60, watchdog_s=2)
    s.start()
    pids = s.pids
    try:
        with pytest.raises(BackendError) as e:
            s.run(hanging_later(), steps=1, warmup=0)
    finally:
        s.close(kill=True)
    msg = str(e.value)
    assert "\n" not in msg
    assert "hung: no rank made progress for 2 s" in msg
    assert "rank 0 waits in communication 1 (MPIAllreduce over devices [0, 1])" in msg
    assert "rank 1 is past communication 0" in msg
    assert all_gone(pids)
    assert not s.started


def test_collective_timeout_and_restart() -> None:
    with Session(2, "gloo", timeout_s=2) as s:
        first = s.pids
        t0 = time.monotonic()
        with pytest.raises(BackendError, match=r"@main failed on rank 0 at MPIAllreduce \(op 0, "
                           r"communication 0 over devices \[0, 1\]\), step 0: .*Timed out"):
            s.run(hanging(), steps=1, warmup=0)
        assert time.monotonic() - t0 < 15
        # The groups may be broken: the next run starts fresh workers, and works.
        fn = distir.parse(ONE_ALLREDUCE).entry
        import numpy as np

        x, y = np.arange(4, dtype=np.float32), np.ones(4, np.float32)
        res = s.run(fn, [x, y], steps=1, warmup=0)
        np.testing.assert_array_equal(res.outputs[0], x + y)
        assert all_gone(first)
        second = s.pids
        with pytest.raises(RuntimeError):
            with s:  # leaving the block on an error kills the workers
                raise RuntimeError("user code failed")
    assert all_gone(second)


def test_dead_worker_is_reported() -> None:
    s = Session(2, "gloo", timeout_s=60)
    s.start()
    pids = s.pids
    killer = threading.Timer(1.0, os.kill, (pids[1], signal.SIGKILL))
    killer.start()
    try:
        with pytest.raises(BackendError, match=r"the worker of rank 1 died while running @main "
                                               r"\(killed by signal 9\); rank 0 waits in"):
            s.run(hanging(), steps=1, warmup=0)
    finally:
        killer.cancel()
        s.close(kill=True)
    assert all_gone(pids)


INTERRUPTED = r"""
import signal
import sys
# A suite started in the background inherits SIGINT ignored: Ctrl-C's handler, as a
# terminal gives it, whatever launched the suite.
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path.insert(0, {root!r})
sys.path.insert(0, {here!r})
from test_failures import hanging
from distir.backend import Session

if __name__ == "__main__":
    with Session(2, "gloo", timeout_s=60) as s:
        print(" ".join(map(str, s.pids)), flush=True)
        s.run(hanging(), steps=1, warmup=0)
"""


def test_interrupt_stops_every_worker(tmp_path: object) -> None:
    script = os.path.join(str(tmp_path), "interrupted.py")
    with open(script, "w") as f:
        f.write(INTERRUPTED.format(root=ROOT, here=os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.Popen([sys.executable, script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        pids = [int(p) for p in line.split()]
        assert len(pids) == 2, proc.stderr.read()  # type: ignore[union-attr]
        time.sleep(1.0)  # rank 0 is now waiting in the all-reduce
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    assert "KeyboardInterrupt" in proc.stderr.read()  # type: ignore[union-attr]
    assert all_gone(pids)


def test_oom_classification() -> None:
    assert is_oom(MemoryError())
    assert is_oom(SimulatedOOM("limit"))
    assert is_oom(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert is_oom(RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate"))

    class OutOfMemoryError(RuntimeError):  # torch.OutOfMemoryError's name
        pass

    assert is_oom(OutOfMemoryError("x"))
    assert not is_oom(RuntimeError("index 9 is out of bounds for dimension 0"))
    assert not is_oom(ValueError("out of memory"))
