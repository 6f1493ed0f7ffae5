"""The NCCL path on GPUs (skipped without CUDA): results equal the reference executor's,
peak memory is measured, an out-of-memory run is recorded, every collective runs.

Programs are built in Python (no text parsing), so these run where ``lark`` is absent.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
N_GPU = torch.cuda.device_count() if torch.cuda.is_available() else 0
two_gpus = pytest.mark.skipif(N_GPU < 2, reason="needs 2 GPUs")

from distir.analysis import execute, random_inputs  # noqa: E402
from distir.backend import Session  # noqa: E402
from distir.ir import DType, FunctionBuilder, TensorType  # noqa: E402
from distir.models import mlp  # noqa: E402


def same(got: list, want: list, rtol: float) -> None:
    """Equal up to ``rtol`` of each result's largest magnitude (GPU kernels sum in another
    order than numpy, so small entries that cancel differ by more than their own size)."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        g64, w64 = g.astype(np.float64), w.astype(np.float64)
        scale = max(1.0, float(np.abs(w64).max()))
        assert float(np.abs(g64 - w64).max()) <= rtol * scale, (np.abs(g64 - w64).max(), scale)


@pytest.fixture(scope="module")
def s1() -> Iterator[Session]:
    with Session(1, "nccl", timeout_s=120) as s:
        yield s


@pytest.fixture(scope="module")
def s2() -> Iterator[Session]:
    if N_GPU < 2:
        pytest.skip("needs 2 GPUs")
    with Session(2, "nccl", timeout_s=120) as s:
        yield s


def small_mlp(dtype: DType = DType.Float32) -> object:
    return mlp(batch_size=32, input_dim=64, hidden_dim=128, output_dim=32, num_layers=4,
               dtype=dtype)


def test_one_gpu_step(s1: Session) -> None:
    fn = small_mlp()
    ins = random_inputs(fn, seed=2)
    res = s1.run(fn, ins, steps=3, warmup=1)
    same(res.outputs, execute(fn, ins), rtol=1e-3)
    params = sum(p.type.size_bytes for p in fn.params)
    assert res.peak_memory_bytes[0] >= params
    assert "H100" in res.device_name or "H200" in res.device_name or res.device_name


def test_gpu_out_of_memory_is_recorded(s1: Session) -> None:
    fn = mlp(batch_size=4096, input_dim=4096, hidden_dim=4096, output_dim=4096, num_layers=8,
             dtype=DType.Float16)
    res = s1.run(fn, steps=1, warmup=0, memory_limit=300 * 2**20)
    assert res.status == "oom" and res.oom_ranks == [0]
    # The cap was the program's own: the next one runs in full.
    assert s1.run(fn, steps=1, warmup=0).status == "ok"


@two_gpus
@pytest.mark.parametrize("cfg", [(2, 1, 1, 1), (1, 1, 2, 2)])
def test_host_cost_is_measured_after_the_timed_steps(s2: Session,
                                                     cfg: tuple[int, int, int, int]) -> None:
    """``host_cost``: each rank's host cost of a step, the device idle after every op; the
    results are those of the plain run. A tiny step is paced by its hosts."""
    from distir.backend.timing import HOST_BOUND
    from distir.transforms import dtp

    fn = small_mlp()
    d, t, p, k = cfg
    dist = dtp(fn, dp=d, tp=t, pp=p, microbatches=k, schedule="1f1b", self_contained=True)
    ins = random_inputs(fn, seed=4)
    res = s2.run(dist, ins, steps=3, warmup=1, host_cost=True)
    same(res.outputs, execute(fn, ins), rtol=1e-3)
    assert len(res.host_cost_s) == 2 and all(c is not None and c > 0 for c in res.host_cost_s)
    assert res.host_share is not None and res.host_share >= HOST_BOUND
    assert "host's own cost per step" in res.summary()
    plain = s2.run(dist, ins, steps=1, warmup=1)
    assert plain.host_cost_s == [] and plain.host_share is None
    graph = s2.run(dist, ins, steps=1, warmup=1, cuda_graph=True, host_cost=True)
    assert graph.host_cost_s == []  # a replay has no per-op host cost to measure


@two_gpus
@pytest.mark.parametrize("cfg", [(2, 1, 1, 1), (1, 2, 1, 1), (1, 1, 2, 2)])
def test_distributed_mlp(s2: Session, cfg: tuple[int, int, int, int]) -> None:
    from distir.transforms import dtp

    fn = small_mlp()
    dist = dtp(fn, dp=cfg[0], tp=cfg[1], pp=cfg[2], microbatches=cfg[3], schedule="1f1b",
               self_contained=True)
    ins = random_inputs(fn, seed=3)
    res = s2.run(dist, ins, steps=2, warmup=1)
    same(res.outputs, execute(fn, ins), rtol=1e-3)
    assert all(p is not None and p > 0 for p in res.peak_memory_bytes)


@two_gpus
@pytest.mark.parametrize("cfg", [(2, 1, 1, 1), (1, 2, 1, 1), (1, 1, 2, 2)])
def test_cuda_graph_replays_the_step(s2: Session, cfg: tuple[int, int, int, int]) -> None:
    """Captured after the warm-up and replayed, the step's collectives and sends included,
    gives the reference's results, and its replays are timed."""
    from distir.transforms import dtp

    fn = small_mlp()
    dist = dtp(fn, dp=cfg[0], tp=cfg[1], pp=cfg[2], microbatches=cfg[3], schedule="1f1b",
               self_contained=True)
    ins = random_inputs(fn, seed=3)
    for warmup in (0, 2):
        res = s2.run(dist, ins, steps=3, warmup=warmup, cuda_graph=True)
        same(res.outputs, execute(fn, ins), rtol=1e-3)
        assert len(res.step_times_s) == 3
        assert res.cuda_graph and res.warmup == 3  # eager, the capture, a replay


def test_cuda_graph_one_gpu(s1: Session) -> None:
    fn = small_mlp()  # a training step
    ins = random_inputs(fn, seed=9)
    eager = s1.run(fn, ins, steps=1, warmup=0)
    graph = s1.run(fn, ins, steps=2, warmup=1, cuda_graph=True)
    same(graph.outputs, eager.outputs, rtol=1e-5)


@two_gpus
def test_every_collective_in_a_cuda_graph(s2: Session) -> None:
    fn = collectives()
    ins = random_inputs(fn, seed=5)
    res = s2.run(fn, ins, steps=2, warmup=1, cuda_graph=True)
    same(res.outputs, execute(fn, ins), rtol=1e-5)


@two_gpus
@pytest.mark.parametrize("dtype", [DType.Float16, DType.BFloat16])
def test_half_precision_data_parallel(s2: Session, dtype: DType) -> None:
    from distir.transforms import dtp

    fn = small_mlp(dtype)
    ins = [(a * 0.1).astype(a.dtype) for a in random_inputs(fn, seed=4)]
    res = s2.run(dtp(fn, dp=2, self_contained=True), ins, steps=1, warmup=0)
    same(res.outputs, execute(fn, ins), rtol=2e-2)


def collectives() -> object:
    """Every collective on devices 0 and 1, participants out of rank order."""
    f32 = DType.Float32
    b = FunctionBuilder("main")
    a0 = b.param("a0", TensorType(f32, (4, 6), 0))
    a1 = b.param("a1", TensorType(f32, (4, 6), 1))
    g1, g0 = b.op("MPIAllgather", a1, a0, axis=1, num_results=2)
    s1, s0 = b.op("MPIReduceScatter", g1, g0, axis=0, num_results=2)
    (c0,) = (b.op("MPIBroadcast", s1, devices=[0], num_results=1),)
    t1, t0 = b.op("MPIScatter", g0, axis=1, devices=[1, 0], num_results=2)
    gat = b.op("MPIGather", t1, t0, axis=0, device=0)
    red = b.op("MPIReduce", t0, t1, device=1)
    back = b.op("Send", red, device=0)
    r0, r1 = b.op("MPIAllreduce", c0, s1, num_results=2)
    return b.ret(g0, s0, c0, gat, back, r0, r1)


@two_gpus
def test_every_collective(s2: Session) -> None:
    fn = collectives()
    ins = random_inputs(fn, seed=5)
    res = s2.run(fn, ins, steps=2, warmup=1)
    same(res.outputs, execute(fn, ins), rtol=1e-5)


four_gpus = pytest.mark.skipif(N_GPU < 4, reason="needs 4 GPUs")


@pytest.fixture(scope="module")
def s4() -> Iterator[Session]:
    if N_GPU < 4:
        pytest.skip("needs 4 GPUs")
    with Session(4, "nccl", timeout_s=120) as s:
        yield s


def collectives4() -> object:
    """Collectives over 2, 3 and 4 of devices 0-3, with roots outside their destinations
    and participants out of rank order."""
    f32 = DType.Float32
    b = FunctionBuilder("main")
    a = b.param("a", TensorType(f32, (2, 3), 0))
    bb = b.param("b", TensorType(f32, (2, 3), 2))
    c = b.param("c", TensorType(f32, (6, 4), 3))
    g2, g0 = b.op("MPIAllgather", bb, a, axis=-1, num_results=2)
    g1 = b.op("Send", g0, device=1)
    s1, s2 = b.op("MPIReduceScatter", g1, g2, axis=0, num_results=2)
    r2, r0 = b.op("MPIBroadcast", s1, devices=[2, 0], num_results=2)
    y = b.op("MPIReduce", r0, r2, device=1)
    c0, c1, c2 = b.op("MPIScatter", c, axis=0, devices=[1, 0, 2], num_results=3)
    all0, all2 = b.op("MPIAllgather", c0, c2, axis=1, num_results=2)
    t = b.op("MPIGather", c2, c1, axis=0, device=3)
    u1, u0, u2 = b.op("MPIReduceScatter", y, r0, r2, axis=1, num_results=3)
    v0, v1, v2 = b.op("MPIAllgather", u0, u1, u2, axis=0, num_results=3)
    return b.ret(y, all0, all2, t, v0, v1, v2, s2)


@four_gpus
def test_every_collective_on_four_gpus(s4: Session) -> None:
    fn = collectives4()
    ins = random_inputs(fn, seed=6)
    same(s4.run(fn, ins, steps=2, warmup=1).outputs, execute(fn, ins), rtol=1e-5)


@four_gpus
@pytest.mark.parametrize("cfg", [(4, 1, 1, 1), (2, 2, 1, 1), (1, 2, 2, 2), (1, 1, 4, 4)])
def test_distributed_mlp_on_four_gpus(s4: Session, cfg: tuple[int, int, int, int]) -> None:
    from distir.transforms import dtp

    fn = small_mlp()
    dist = dtp(fn, dp=cfg[0], tp=cfg[1], pp=cfg[2], microbatches=cfg[3], schedule="1f1b",
               self_contained=True)
    ins = random_inputs(fn, seed=7)
    same(s4.run(dist, ins, steps=1, warmup=0).outputs, execute(fn, ins), rtol=1e-3)


@four_gpus
@pytest.mark.parametrize("cfg", [(2, 2, 1, 1), (2, 1, 2, 2)])
@pytest.mark.parametrize("cuda_graph", [False, True])
def test_distributed_gpt2_on_four_gpus(s4: Session, cfg: tuple[int, int, int, int],
                                       cuda_graph: bool) -> None:
    from distir.models import gpt2
    from distir.transforms import dtp

    fn = gpt2(n_layer=2, d_model=32, n_head=4, vocab_size=64, seq_len=16, batch_size=4)
    dist = dtp(fn, dp=cfg[0], tp=cfg[1], pp=cfg[2], microbatches=cfg[3], schedule="gpipe",
               self_contained=True)
    ins = random_inputs(fn, seed=8)
    res = s4.run(dist, ins, steps=1, warmup=int(cuda_graph), cuda_graph=cuda_graph)
    same(res.outputs, execute(fn, ins), rtol=1e-3)


def test_fused_adam_on_a_scalar_weight() -> None:
    """CUDA's fused Adam wants equal sizes: a 0-d weight (a scalar initializer of an
    exported model) and its moments arrive 0-d, as its gradient is."""
    from distir.backend.lowering import compile_program
    from distir.backend.worker import to_numpy, to_torch
    from tests.backend.test_lowering import one_op, project

    x = (DType.Float32, ())
    fn = one_op("AdamOptimizer", [x, x, x, x, np.array(3, np.float32)], n_out=3, lr=0.01)
    ins = [np.array(v, np.float32) for v in (0.5, 0.1, 0.2, 0.3)]
    prog = compile_program(project(fn).programs[-1], torch.device("cuda", 0))
    with torch.inference_mode():
        got = [to_numpy(t) for t in prog.run([to_torch(a, "cuda:0") for a in ins])]
    want = execute(fn, ins)
    for g, w in zip(got, want, strict=True):
        assert g.shape == () and np.allclose(g, w, rtol=1e-5)
