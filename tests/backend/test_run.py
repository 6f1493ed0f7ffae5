"""Real runs on the CPU with gloo, 2 and 4 processes: distributed programs give the
reference executor's results; failures are reported, not hung on.

One ``Session`` per world size serves every program of this module (as a grid's top-k
would), so the start-up cost is paid twice.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

import numpy as np
import pytest
import torch  # noqa: F401 - the test needs it

import distir  # noqa: E402
from distir.analysis import execute, random_inputs  # noqa: E402
from distir.analysis.projection import project  # noqa: E402
from distir.backend import Session  # noqa: E402
from distir.errors import (  # noqa: E402
    BackendError,
    ConfigError,
    ExecutionError,
    UnsupportedError,
)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# shared/ lies beside the repository (here and in CI); $DISTIR_SHARED_EXAMPLES overrides.
SHARED = os.environ.get("DISTIR_SHARED_EXAMPLES",
                        os.path.join(os.path.dirname(ROOT), "shared", "examples"))


@pytest.fixture(scope="module")
def s2() -> Iterator[Session]:
    with Session(2, "gloo", timeout_s=60) as s:
        yield s


@pytest.fixture(scope="module")
def s4() -> Iterator[Session]:
    with Session(4, "gloo", timeout_s=60) as s:
        yield s


def same(got: list[np.ndarray], want: list[np.ndarray], rtol: float = 1e-4) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol)


def example(name: str) -> distir.Function:
    path = os.path.join(ROOT, "examples", name)
    if not os.path.exists(path):
        path = os.path.join(SHARED, name)
    if not os.path.exists(path):
        pytest.skip(f"{name} absent")
    return distir.load(path).entry


@pytest.mark.parametrize("name", ["mlp_step_dp2.dir", "mlp_step_pp2.dir",
                                  "mlp_data_parallel_2dev.dir", "mlp_pipeline_2dev.dir"])
def test_examples_match_the_reference(s2: Session, name: str) -> None:
    fn = example(name)
    ins = random_inputs(fn, seed=1)
    res = s2.run(fn, ins, steps=2, warmup=1)
    assert res.status == "ok"
    same(res.outputs, execute(fn, ins))
    # Timing: one time per rank and timed step; the step is the slowest rank's.
    assert len(res.rank_times_s) == 2 and all(len(t) == 2 for t in res.rank_times_s)
    assert res.step_latency_s == pytest.approx(np.median(res.step_times_s))
    assert res.step_latency_s > 0 and res.throughput == pytest.approx(1 / res.step_latency_s)
    assert res.peak_memory_bytes == [None, None]  # no CUDA allocator on the CPU
    assert res.static_peak_bytes[0] > 0


def test_random_inputs_and_no_outputs(s2: Session) -> None:
    res = s2.run(example("mlp_step_dp2.dir"), steps=3, warmup=0)
    assert res.status == "ok" and res.outputs is None and len(res.step_times_s) == 3
    d = res.to_dict()
    assert d["world_size"] == 2 and d["status"] == "ok" and len(d["rank_times_s"]) == 2


def test_a_step_on_nan_is_flagged(s2: Session) -> None:
    """A step whose results hold NaN is counted per rank and named in the summary (its time
    may not be training's); a finite one is not, nor one that returns infinities."""
    res = s2.run(example("mlp_step_dp2.dir"), steps=1, warmup=0)
    assert res.nonfinite == [0, 0] and "NaN" not in res.summary()
    fn = distir.parse("""func @main(%x: Tensor[Float32, (4, 8), 0],
           %y: Tensor[Float32, (4, 8), 1]) {
  %a = Sqrt(%x)
  %b = Neg(%y)
  %c = Log(%y)
  return %a, %b, %c
}
""").entry
    ins = [np.full((4, 8), -1.0, np.float32), np.zeros((4, 8), np.float32)]
    res = s2.run(fn, ins, steps=1, warmup=0)
    assert res.nonfinite == [1, 0], res.nonfinite  # sqrt(-1) on rank 0; log(0) is -inf
    assert "1 result(s) of the step hold NaN" in res.summary()
    assert res.to_dict()["nonfinite"] == [1, 0]


def test_filled_inputs_run_as_their_values(s2: Session) -> None:
    """Inputs of one repeated value travel as the value (``wire.task_message``) and the
    ranks compute on the whole tensors they stand for."""
    fn = distir.parse("""func @main(%x: Tensor[Float32, (64, 128), 0],
           %y: Tensor[Float32, (64, 128), 1]) {
  %a = Add(%x, %x)
  %b = Mul(%y, %y)
  return %a, %b
}
""").entry
    ins = [np.zeros((64, 128), np.float32), np.full((64, 128), 3.0, np.float32)]
    res = s2.run(fn, ins, steps=1, warmup=0)
    same(res.outputs, [ins[0], np.full((64, 128), 9.0, np.float32)])


def test_bad_inputs_are_one_line(s2: Session) -> None:
    fn = example("mlp_step_dp2.dir")
    ins = random_inputs(fn)
    ins[0] = ins[0].astype(np.float64)
    with pytest.raises(ExecutionError, match=r"input 0 of @main is Float64 \(24, 48\), the "
                                             r"program takes Float32 \(24, 48\)"):
        s2.run(fn, ins)


def test_out_of_memory_is_recorded(s2: Session) -> None:
    fn = example("mlp_step_pp2.dir")
    params = sum(p.type.size_bytes for p in fn.params)
    res = s2.run(fn, steps=2, warmup=0, memory_limit=params + 1024)
    assert res.status == "oom" and 0 in res.oom_ranks
    assert re.search(r"rank 0 ran out of memory at \w+ \(op \d+.*\), step 0: SimulatedOOM: "
                     "the live tensors would exceed the memory limit", res.message)
    assert res.step_latency_s is None and res.outputs is None
    # The ranks drained their communication: the session still runs programs.
    ins = random_inputs(fn)
    same(s2.run(fn, ins, steps=1, warmup=0).outputs, execute(fn, ins))


FAILS_ON_RANK0 = """
func @main(%w: Tensor[Float32, (5, 3), 0], %i: Tensor[Int64, (2,), 0]) {
  %g = Gather(%w, %i, axis=0)
  %h = Send(%g, device=1)
  %r = Relu(%h)
  %b = Send(%r, device=0)
  return %b
}
"""


def test_error_in_one_rank_leaves_the_others_free(s2: Session) -> None:
    fn = distir.parse(FAILS_ON_RANK0).entry
    w = np.ones((5, 3), np.float32)
    with pytest.raises(BackendError, match=r"failed on rank 0 at Gather \(op 0\), step 0: "
                                           r".*index") as e:
        s2.run(fn, [w, np.array([1, 9])], steps=1, warmup=0)
    assert "\n" not in str(e.value)
    res = s2.run(fn, [w, np.array([1, 4])], steps=1, warmup=0)
    same(res.outputs, [np.ones((2, 3), np.float32)])


def test_cuda_graph_needs_a_gpu(s2: Session) -> None:
    """A CUDA graph asked of CPU ranks is refused in one line; the session runs on."""
    fn = example("mlp_step_dp2.dir")
    with pytest.raises(ConfigError, match=r"CUDA graphs need a GPU.*run without "
                                           r"--cuda-graph") as e:
        s2.run(fn, steps=1, warmup=1, cuda_graph=True)
    assert "\n" not in str(e.value)
    assert s2.run(fn, steps=1, warmup=0).status == "ok"


def test_host_cost_is_for_gpus(s2: Session) -> None:
    """On CPU ranks the ops' cost is the whole step: ``host_cost`` measures nothing there."""
    fn = example("mlp_step_dp2.dir")
    res = s2.run(fn, steps=1, warmup=0, host_cost=True)
    assert res.status == "ok" and res.host_cost_s == [] and res.host_share is None


def test_isolated_times_each_op_and_synchronises_after_it() -> None:
    from distir.backend.lowering import compile_program, isolated
    from distir.backend.worker import draw_inputs

    fn = example("mlp_step.dir")
    prog = project(fn).programs[0]
    compiled = compile_program(prog, torch.device("cpu"))
    gen = torch.Generator().manual_seed(0)
    inputs = draw_inputs(prog.fn, torch.device("cpu"), gen)
    syncs: list[int] = []
    iso, times = isolated(compiled, lambda: syncs.append(1))
    a = iso.run(inputs)
    assert len(syncs) == len(compiled.steps) == len(times)
    assert all(t > 0 for t in times)
    b = compiled.run(inputs)  # the original is left as it was
    assert len(syncs) == len(compiled.steps)
    assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_host_share_and_summary() -> None:
    from distir.backend.timing import HOST_BOUND, RunResult

    r = RunResult("f", "nccl", 2, 2, 1, rank_times_s=[[0.010, 0.010], [0.009, 0.011]],
                  host_cost_s=[0.0085, 0.0095])
    assert r.host_share == pytest.approx(0.0095 / 0.0105)
    assert r.host_share >= HOST_BOUND and "paced by the host" in r.summary()
    assert r.to_dict()["host_cost_s"] == [0.0085, 0.0095]
    r.host_cost_s = [0.001, 0.002]
    assert "host's own cost per step" in r.summary() and "paced" not in r.summary()
    assert RunResult("f", "nccl", 1, 1, 0, rank_times_s=[[0.01]]).host_share is None


def test_unsupported_op_before_running(s2: Session, monkeypatch: pytest.MonkeyPatch) -> None:
    from distir.backend.lowering import LOWERINGS, load_lowerings

    load_lowerings()
    monkeypatch.delitem(LOWERINGS.rules, "ReluGrad")
    with pytest.raises(UnsupportedError, match=r"op 'ReluGrad' has no PyTorch lowering"):
        s2.run(example("mlp_step_dp2.dir"))


def test_many_programs_one_start(s2: Session) -> None:
    pids = s2.pids
    for name in ("mlp_step_dp2.dir", "mlp_step_pp2.dir"):
        s2.run(example(name), steps=1, warmup=0)
    assert s2.pids == pids


PERMUTED = """
func @main(%a: Tensor[Float32, (2, 3), 0], %b: Tensor[Float32, (2, 3), 2],
           %c: Tensor[Float32, (6, 4), 3]) {
  %g2, %g0 = MPIAllgather(%b, %a, axis=-1)
  %g1 = Send(%g0, device=1)
  %s1, %s2 = MPIReduceScatter(%g1, %g2, axis=0)
  %r2, %r0 = MPIBroadcast(%s1, devices=[2, 0])
  %y = MPIReduce(%r0, %r2, device=1)
  %c0, %c1, %c2 = MPIScatter(%c, axis=0, devices=[1, 0, 2])
  %all0, %all2 = MPIAllgather(%c0, %c2, axis=1)
  %t = MPIGather(%c2, %c1, axis=0, device=3)
  %u1, %u0, %u2 = MPIReduceScatter(%y, %r0, %r2, axis=1)
  %v0, %v1, %v2 = MPIAllgather(%u0, %u1, %u2, axis=0)
  return %y, %all0, %all2, %t, %v0, %v1, %v2
}
"""


def test_every_collective_on_four_ranks(s4: Session) -> None:
    fn = distir.parse(PERMUTED).entry
    ins = random_inputs(fn, seed=3)
    res = s4.run(fn, ins, steps=2, warmup=1)
    same(res.outputs, execute(fn, ins), rtol=1e-5)


def test_two_device_programs_on_four_ranks(s4: Session) -> None:
    fn = example("mlp_step_pp2.dir")
    ins = random_inputs(fn)
    res = s4.run(fn, ins, steps=1, warmup=0)
    same(res.outputs, execute(fn, ins))
    assert len(res.rank_times_s) == 4


# ---- the D/T/P/K programs of the transforms --------------------------------------------


MLP_CONFIGS = [(2, 1, 1, 1), (1, 2, 1, 1), (1, 1, 2, 2), (2, 2, 1, 1), (1, 2, 2, 2),
               (2, 1, 2, 2), (1, 1, 4, 4), (4, 1, 1, 1)]
GPT2_CONFIGS = [(2, 1, 1, 1), (1, 2, 1, 1), (1, 1, 2, 2), (2, 2, 1, 1), (2, 1, 2, 2)]


def _run_config(s: Session, fn: distir.Function, cfg: tuple[int, int, int, int],
                schedule: str) -> None:
    from distir.transforms import dtp

    dp, tp, pp, k = cfg
    dist = dtp(fn, dp=dp, tp=tp, pp=pp, microbatches=k, schedule=schedule,
               self_contained=True)
    ins = random_inputs(fn, seed=5)
    want = execute(fn, ins)
    res = s.run(dist, ins, steps=1, warmup=0)
    same(res.outputs, want, rtol=2e-4)


def _session_for(cfg: tuple[int, ...], s2: Session, s4: Session) -> Session:
    return s2 if cfg[0] * cfg[1] * cfg[2] <= 2 else s4


@pytest.mark.parametrize("cfg", MLP_CONFIGS, ids=lambda c: "D{}T{}P{}K{}".format(*c))
def test_mlp_configurations(cfg: tuple[int, int, int, int], request: pytest.FixtureRequest,
                            ) -> None:
    from distir.models import mlp

    fn = mlp(batch_size=16, input_dim=8, hidden_dim=16, output_dim=8, num_layers=4)
    fn = fn.entry if isinstance(fn, distir.Module) else fn
    s = request.getfixturevalue("s2" if cfg[0] * cfg[1] * cfg[2] <= 2 else "s4")
    _run_config(s, fn, cfg, "1f1b" if cfg[2] > 1 else "gpipe")


@pytest.mark.parametrize("cfg", GPT2_CONFIGS, ids=lambda c: "D{}T{}P{}K{}".format(*c))
def test_gpt2_configurations(cfg: tuple[int, int, int, int], request: pytest.FixtureRequest,
                             ) -> None:
    from distir.models import gpt2

    fn = gpt2(n_layer=2, d_model=16, n_head=2, vocab_size=32, seq_len=8, batch_size=4)
    fn = fn.entry if isinstance(fn, distir.Module) else fn
    s = request.getfixturevalue("s2" if cfg[0] * cfg[1] * cfg[2] <= 2 else "s4")
    _run_config(s, fn, cfg, "gpipe")


def test_projection_is_what_runs(s2: Session) -> None:
    """A ready projection runs as given (the simulator's program, projected once)."""
    fn = example("mlp_step_dp2.dir")
    proj = project(fn)
    ins = random_inputs(fn)
    same(s2.run(proj, ins, steps=1, warmup=0).outputs, execute(fn, ins))
