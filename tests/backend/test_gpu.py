"""The NCCL path on GPUs (skipped without CUDA): results equal the reference executor's,
peak memory is measured, an out-of-memory run is recorded, every collective runs.

Programs are built in Python (no text parsing), so these run where ``lark`` is absent.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
N_GPU = torch.cuda.device_count() if torch.cuda.is_available() else 0
two_gpus = pytest.mark.skipif(N_GPU < 2, reason="needs 2 GPUs")

from distir.analysis import execute, random_inputs  # noqa: E402
from distir.backend import Session  # noqa: E402
from distir.ir import DType, FunctionBuilder, TensorType  # noqa: E402
from distir.models import mlp  # noqa: E402


def same(got: list, want: list, rtol: float) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol,
                                   atol=rtol)


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
@pytest.mark.parametrize("dtype", [DType.Float16, DType.BFloat16])
def test_half_precision_data_parallel(s2: Session, dtype: DType) -> None:
    from distir.transforms import dtp

    fn = small_mlp(dtype)
    ins = [a * 0.1 for a in random_inputs(fn, seed=4)]
    res = s2.run(dtp(fn, dp=2, self_contained=True), ins, steps=1, warmup=0)
    same(res.outputs, execute(fn, ins), rtol=3e-2)


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
