"""``grid_search.kernel_timeline`` on a hand-made trace: busy and idle times of the
compute and NCCL kernels within the profiled step, the host's blocking calls, and the
longest idle stretch of the compute stream with the call the host was in."""

from __future__ import annotations

import json

import pytest

from grid_search.kernel_timeline import main, summarize_dir


def _trace(d, rank: int, step_s: float, events: list[tuple]) -> None:  # noqa: ANN001
    """``d/rank<rank>.json``: ``events`` as (name, category, start, duration) in us."""
    d.mkdir(exist_ok=True)
    doc = {"traceEvents": [{"ph": "X", "name": n, "cat": c, "ts": t, "dur": u}
                           for n, c, t, u in events],
           "distir": {"rank": rank, "program": "main", "step_s": step_s}}
    (d / f"rank{rank}.json").write_text(json.dumps(doc))


def test_a_step_whose_host_waits_for_its_device(tmp_path, capsys) -> None:
    us = [  # (name, category, start, duration) in microseconds
        ("ProfilerStep#1", "user_annotation", 0, 1000),
        ("sm90_gemm", "kernel", 10, 100), ("elementwise", "kernel", 105, 50),
        ("ncclDevKernel_AllReduce", "kernel", 300, 200), ("gemm2", "kernel", 700, 400),
        ("cudaLaunchKernel", "cuda_runtime", 5, 4),
        ("cudaStreamSynchronize", "cuda_runtime", 160, 500),
        ("cudaMemcpyAsync", "cuda_runtime", 670, 5),
        ("before the step", "kernel", -50, 10)]
    d = tmp_path / "b8_d4_t1_p1_k1"
    _trace(d, 0, 0.0011, us)
    (r,) = summarize_dir(str(d))
    # Compute kernels 10-155 and 700-1100 (the last runs past the host's step range).
    assert r["span_s"] == pytest.approx(1100e-6)
    assert r["compute_busy_s"] == pytest.approx(545e-6)
    assert r["nccl_busy_s"] == pytest.approx(200e-6)
    assert r["idle_s"] == pytest.approx(1100e-6 - 745e-6)
    assert r["blocking"] == {"cudaStreamSynchronize": {"calls": 1, "s": pytest.approx(5e-4)}}
    assert r["kernels"] == 4 and r["launches"] == 1  # (the one before the step is not)
    g = r["compute_idle_gaps"][0]
    assert (g["at_s"], g["idle_s"], g["host_in"]) == (pytest.approx(155e-6),
                                                      pytest.approx(545e-6),
                                                      "cudaStreamSynchronize")
    assert main([str(d), "-o", str(tmp_path / "s.json")]) == 0
    assert "b8_d4_t1_p1_k1" in capsys.readouterr().out
    assert json.loads((tmp_path / "s.json").read_text())[0]["rank"] == 0


def test_the_barrier_before_the_step_is_left_out(tmp_path) -> None:
    """The recorded range starts at the barrier before the step; the timed step is the
    ``step_s`` before its last kernel ends."""
    us = [("ProfilerStep#1", "user_annotation", 0, 2000),
          ("ncclDevKernel_AllReduce barrier", "kernel", 10, 390),
          ("cudaStreamSynchronize", "cuda_runtime", 10, 390),
          ("gemm", "kernel", 500, 600), ("gemm", "kernel", 1200, 300)]
    d = tmp_path / "b8_d2_t1_p1_k1"
    _trace(d, 1, 0.001, us)
    (r,) = summarize_dir(str(d))
    assert r["span_s"] == pytest.approx(1000e-6)
    assert (r["compute_busy_s"], r["nccl_busy_s"]) == (pytest.approx(900e-6), 0.0)
    assert r["kernels"] == 2 and r["compute_idle_gaps"][0]["idle_s"] == pytest.approx(100e-6)
