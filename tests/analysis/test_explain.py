"""``distir run --profile`` and ``distir explain``: per-op traces aligned with the simulation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
import torch

import distir
from distir.analysis.explain import ExplainError, explain, format_table
from distir.analysis.projection import project
from distir.ir.schemas import ASYNC_OPS
from distir.transforms import dtp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def distir_cmd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "distir", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=240)


def _step(dp: int, tp: int, pp: int, k: int) -> Any:
    fn = distir.models.mlp(batch_size=16, input_dim=32, hidden_dim=32, output_dim=32,
                           num_layers=4)
    return dtp(fn, dp=dp, tp=tp, pp=pp, microbatches=k)


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A D2/T1/P2 step with 2 microbatches (data-parallel all-reduces, pipeline sends), run
    on gloo with --profile: (program, DIR). (Four ranks, not eight, to keep CI fast.)"""
    d = tmp_path_factory.mktemp("explain")
    prog = os.path.join(str(d), "step.dir")
    with open(prog, "w", encoding="utf-8") as f:
        f.write(distir.dumps(_step(2, 1, 2, 2)))
    out = os.path.join(str(d), "prof")
    r = distir_cmd("run", prog, "--backend", "gloo", "--steps", "1", "--warmup", "0",
                   "--profile", out, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["status"] == "ok"
    return prog, out


def test_profile_writes_one_marked_trace_per_rank(profiled: tuple[str, str]) -> None:
    prog, out = profiled
    proj = project(distir.load(prog).entry)
    assert sorted(os.listdir(out)) == [f"rank{r}.json" for r in range(proj.world_size)]
    for p in proj.programs:
        with open(os.path.join(out, f"rank{p.device}.json"), encoding="utf-8") as f:
            doc = json.load(f)
        assert doc["distir"]["op_types"] == [op.op_type for op in p.fn.ops]
        names = [e["name"] for e in doc["traceEvents"] if e.get("cat") == "user_annotation"
                 and e["name"].startswith("distir#")]
        ops = [n for n in names if not n.endswith(" wait")]
        assert ops == [f"distir#{i} {op.op_type}" for i, op in enumerate(p.fn.ops)]
        waits = [n for n in names if n.endswith(" wait")]
        assert len(waits) == sum(op.op_type in ASYNC_OPS for op in p.fn.ops) > 0


def test_explain_covers_every_kind_and_adds_up(profiled: tuple[str, str]) -> None:
    prog, out = profiled
    fn = distir.load(prog).entry
    ex = explain(fn, [out], "h100-sxm")
    kinds = {op.op_type for p in project(fn).programs for op in p.fn.ops}
    assert set(ex.kinds) == kinds
    assert sum(n for n, _, _ in ex.kinds.values()) == sum(
        len(p.fn.ops) for p in project(fn).programs)
    diffs = [abs(m - s) for _, _, _, s, m in ex.ops]
    assert diffs == sorted(diffs, reverse=True)
    for d, (sim_busy, meas_busy, sim_step, meas_step) in ex.devices.items():
        # On the CPU the op ranges tile the step: their sum is much of the rank's step time
        # and never more than it. (Four ranks on CI's two cores: a rank descheduled between
        # its ops measured 46% of its step once, so the lower bound is loose.)
        assert 0.25 * meas_step <= meas_busy <= meas_step * 1.001, (d, meas_busy, meas_step)
        assert 0 < sim_busy and sim_step <= ex.simulated_latency_s * (1 + 1e-9)
    assert ex.measured_latency_s == max(v[3] for v in ex.devices.values())
    for path, spans in zip(ex.critical, (ex.sim_spans, ex.measured_spans)):
        assert path[-1].end == max(s.end for s in spans.values())
        assert len({(s.device, s.index) for s in path}) == len(path)
    for w, path in enumerate(ex.critical):
        assert sum(ex.path_by_kind(w).values()) == pytest.approx(path[-1].end - path[0].start)
    # The measured path runs over every rank's timeline, whose starts the barrier leaves
    # up to a fraction of a millisecond apart on a loaded CPU (measured 1.07x there): it
    # spans about one step, never several.
    assert sum(ex.path_by_kind(1).values()) <= 1.25 * ex.measured_latency_s
    sim_path = ex.critical[0]
    assert all(a.end <= b.end + 1e-12 for a, b in zip(sim_path, sim_path[1:]))
    assert {s.kind for s in sim_path} >= {"MatMul", "MatMulGrad", "Send", "SGDOptimizer"}
    table = format_table(ex)
    for k in kinds:
        assert f"\n{k} " in table


def test_explain_cli_table_json_and_perfetto(profiled: tuple[str, str], tmp_path: Any) -> None:
    prog, out = profiled
    trace = os.path.join(str(tmp_path), "both.json")
    r = distir_cmd("explain", out, "--program", prog, "-o", trace, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert {k["kind"] for k in doc["kinds"]} >= {"MatMul", "MPIAllreduce", "Send", "Recv"}
    assert len(doc["devices"]) == 4
    with open(trace, encoding="utf-8") as f:
        evs = json.load(f)["traceEvents"]
    names = {(e["pid"], e["args"]["name"]) for e in evs if e.get("name") == "thread_name"}
    for d in range(4):
        assert (0, f"device {d}") in names and (1, f"device {d}") in names
    assert {e["pid"] for e in evs if e.get("ph") == "X"} == {0, 1}
    files = [os.path.join(out, f) for f in sorted(os.listdir(out))]
    r = distir_cmd("explain", *files, "--program", prog)
    assert r.returncode == 0, r.stderr
    assert "per op kind" in r.stdout and "critical path, measured" in r.stdout


def test_explain_errors_are_one_line(profiled: tuple[str, str], tmp_path: Any) -> None:
    prog, out = profiled
    other = os.path.join(str(tmp_path), "other.dir")
    with open(other, "w", encoding="utf-8") as f:
        f.write(distir.dumps(_step(2, 1, 2, 1)))
    files = [os.path.join(out, f"rank{r}.json") for r in range(4)]
    junk = os.path.join(str(tmp_path), "junk.json")
    with open(junk, "w", encoding="utf-8") as f:
        json.dump({"traceEvents": []}, f)
    cases = [((*files, "--program", other), "does not match the program"),
             ((*files[:2], "--program", prog), "no trace of rank(s) [2, 3]"),
             ((junk, "--program", prog), "not a trace written by `distir run --profile`"),
             ((os.path.join(str(tmp_path), "none.json"), "--program", prog), "no such file")]
    for args, msg in cases:
        r = distir_cmd("explain", *args)
        assert r.returncode == 1 and msg in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def _gpu_like_trace(fn: Any, path: str) -> list[float]:
    """A trace as the profiler writes it on a GPU: each op's range launches one kernel
    (matched by correlation id); returns each op's kernel seconds."""
    ops = project(fn).programs[0].fn.ops
    evs: list[dict[str, Any]] = []
    secs = []
    for i, op in enumerate(ops):
        t = 100.0 * i
        evs.append({"ph": "X", "cat": "user_annotation", "name": f"distir#{i} {op.op_type}",
                    "pid": 1, "tid": 1, "ts": t, "dur": 20.0})
        if op.op_type == "Constant":
            secs.append(0.0)
            continue
        evs.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                    "tid": 1, "ts": t + 5, "dur": 4.0, "args": {"correlation": 7 + i}})
        evs.append({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7,
                    "ts": 1000.0 + 50 * i, "dur": 10.0 + i,
                    "args": {"correlation": 7 + i, "stream": 7}})
        secs.append((10.0 + i) / 1e6)
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"traceEvents": evs, "distir": {
            "rank": 0, "op_types": [op.op_type for op in ops], "step_s": 0.01,
            "backend": "nccl", "device": "NVIDIA H100 80GB HBM3"}}, f)
    return secs


def test_gpu_traces_time_ops_by_their_kernels(tmp_path: Any) -> None:
    fn = _step(1, 1, 1, 1)
    path = os.path.join(str(tmp_path), "rank0.json")
    secs = _gpu_like_trace(fn, path)
    ex = explain(fn, [path], "h100-sxm")
    got = [ex.measured_spans[(0, i)].seconds for i in range(len(secs))]
    assert got == pytest.approx(secs)
    assert ex.devices[0][1] == pytest.approx(sum(secs))
    assert ex.measured_spans[(0, 0)].start == 0.0  # the first kernel is the origin
    with pytest.raises(ExplainError, match="does not match"):
        explain(distir.models.mlp(batch_size=16, input_dim=32, hidden_dim=32,
                                  output_dim=32, num_layers=2), [path], "h100-sxm")


def test_marked_copy_leaves_the_timed_program_alone() -> None:
    from distir.backend.lowering import compile_program
    from distir.backend.profiling import marked, parse_marker

    prog = project(_step(1, 1, 1, 1)).programs[0]
    c = compile_program(prog, torch.device("cpu"))
    kernels = [st.kernel for st in c.steps]
    m = marked(c)
    assert [st.kernel for st in c.steps] == kernels
    assert all(a.kernel is not b.kernel for a, b in zip(m.steps, c.steps))
    assert parse_marker("distir#12 MatMul") == (12, "MatMul", False)
    assert parse_marker("distir#3 MPIAllreduce wait") == (3, "MPIAllreduce", True)
    assert parse_marker("aten::mm") is None


def _replay_trace(fn: Any, path: str, scale: float, drop: int | None = None) -> list[float]:
    """The replay of ``_gpu_like_trace``'s program as a graph would be traced: the same
    kernels in the same order (no marks, no launches), each ``scale`` times as long, an
    extra memset at the start and kernel ``drop`` missing; returns each op's seconds."""
    ops = project(fn).programs[0].fn.ops
    evs: list[dict[str, Any]] = [{"ph": "X", "cat": "gpu_memset", "name": "Memset", "pid": 0,
                                  "tid": 7, "ts": 10.0, "dur": 1.0, "args": {"stream": 7}}]
    secs = []
    t = 20.0
    for i, op in enumerate(ops):
        if op.op_type == "Constant" or i == drop:
            secs.append(0.0)
            continue
        dur = (10.0 + i) * scale
        evs.append({"ph": "X", "cat": "kernel", "name": f"k{op.op_type}", "pid": 0,
                    "tid": 7, "ts": t, "dur": dur, "args": {"stream": 7}})
        t += dur + 1.0
        secs.append(dur / 1e6)
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"traceEvents": evs, "distir": {
            "rank": 0, "op_types": [op.op_type for op in ops], "step_s": t / 1e6,
            "backend": "nccl", "device": "NVIDIA H100 80GB HBM3"}}, f)
    return secs


def test_replayed_graph_times_ops_by_the_matched_kernels(tmp_path: Any) -> None:
    fn = _step(1, 1, 1, 1)
    eager = os.path.join(str(tmp_path), "rank0.json")
    _gpu_like_trace(fn, eager)
    # the eager kernels are named after their ops, as the replay's are
    with open(eager, encoding="utf-8") as f:
        doc = json.load(f)
    ops = project(fn).programs[0].fn.ops
    for e in doc["traceEvents"]:
        if e["cat"] == "kernel":
            e["name"] = f"k{ops[e['args']['correlation'] - 7].op_type}"
    with open(eager, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    rdir = os.path.join(str(tmp_path), "replay")
    os.makedirs(rdir)
    kernels = [i for i, op in enumerate(ops) if op.op_type != "Constant"]
    drop = kernels[len(kernels) // 2]
    secs = _replay_trace(fn, os.path.join(rdir, "rank0.json"), 0.5, drop=drop)
    ex = explain(fn, [eager], "h100-sxm", replay=[rdir])
    got = [ex.measured_spans[(0, i)].seconds for i in range(len(ops))]
    assert got == pytest.approx(secs)  # half the eager times; the dropped one counts 0
    rep = ex.replay[0]
    assert rep["unmatched"] == [1, 1]  # the dropped kernel; the memset
    assert rep["kernel_s"] == pytest.approx(sum(secs) + 1e-6)
    assert rep["eager_step_s"] == 0.01 and rep["step_s"] > rep["kernel_s"]
    assert ex.measured_latency_s == pytest.approx(rep["step_s"])
    assert "replayed CUDA graph" in format_table(ex)
    assert ex.to_dict()["replay"]["0"]["unmatched"] == [1, 1]
    with pytest.raises(ExplainError, match="no replay trace of rank 0"):
        explain(fn, [eager], "h100-sxm", replay=[_other_rank(rdir)])
    prog = os.path.join(str(tmp_path), "step.dir")
    with open(prog, "w", encoding="utf-8") as f:
        f.write(distir.dumps(fn))
    r = distir_cmd("explain", eager, "--replay", rdir, "--program", prog, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["replay"]["0"]["unmatched"] == [1, 1]
    # --replay takes one path: the measured traces may follow it
    r = distir_cmd("explain", "--program", prog, "--json", "--replay", rdir, eager)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["replay"]["0"]["unmatched"] == [1, 1]


def _other_rank(rdir: str) -> str:
    """A copy of ``rdir``'s trace claiming to be rank 1's."""
    src = os.path.join(rdir, "rank0.json")
    with open(src, encoding="utf-8") as f:
        doc = json.load(f)
    doc["distir"]["rank"] = 1
    dst = os.path.join(os.path.dirname(rdir), "rank1_only.json")
    with open(dst, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    return dst


def test_align_replay_resynchronizes_after_mismatches() -> None:
    from distir.analysis.explain import align_replay

    def a(name: str, ts: float) -> tuple:
        return (ts, 1.0, 7, name)

    by_op = {0: [a("x", 0)], 1: [a("y", 1), a("ncclAllReduce", 2)], 2: [a("z", 3)]}
    # the replay runs the all-reduce earlier (another stream) and adds a kernel
    replay = [a("ncclAllReduce", 0.5), a("x", 1), a("extra", 2), a("y", 3), a("z", 4)]
    got, lost_e, lost_r = align_replay(by_op, replay)
    assert [r[3] for r in got[0]] == ["x"]
    assert [r[3] for r in got[1]] == ["y", "ncclAllReduce"]
    assert [r[3] for r in got[2]] == ["z"]
    assert (lost_e, lost_r) == (0, 1)


def test_a_trace_with_folded_initializers_says_to_read_the_weights() -> None:
    """The same ops but some folded into constants on one side only (the run's program had
    its small initializers, this reading of it does not): the error says so."""
    from types import SimpleNamespace

    from distir.analysis.explain import _check_ops

    ops = [SimpleNamespace(op_type=t) for t in ("Identity", "MatMul", "Relu")]
    doc = {"distir": {"op_types": ["Constant", "MatMul", "Relu"]}}
    with pytest.raises(ExplainError, match=r"first difference at op 0: Constant vs "
                                           r"Identity\); read the program with the same "
                                           r"weights \(\.npz\)"):
        _check_ops("rank0.json", 0, doc, ops)
    doc = {"distir": {"op_types": ["Identity", "Gemm", "Relu"]}}
    with pytest.raises(ExplainError, match=r"profile this program with `distir run"):
        _check_ops("rank0.json", 0, doc, ops)
