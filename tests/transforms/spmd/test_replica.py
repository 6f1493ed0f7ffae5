"""``compose_dtp_replica``: the passes' program of data-parallel replica 0 alone, which
simulates as ``compose_dtp``'s program of every replica (latency, per-device times and
peak memory, op count, trace) at a cost that does not grow with ``dp``."""

from __future__ import annotations

import dataclasses
import time

import pytest

import distir
from distir.analysis import type_env
from distir.analysis.hardware import LinkSpec, load_hardware
from distir.analysis.replicas import ReplicaProgram, replica_program
from distir.analysis.simulator import simulate
from distir.errors import TransformError
from distir.transforms.plan import analyze
from distir.transforms.spmd import compose_dtp, compose_dtp_replica, plan_dtp
from distir.transforms.spmd.pipeline import lower_pipeline
from tests.analysis.test_simulator_peers import _gemm_step
from tests.analysis.test_simulator_replicas import assert_same_as_every_replica
from tests.transforms.spmd.test_pipeline import _gpt2_step, _mlp, _sequence_major_step

HW = load_hardware("h100-sxm")
CONFIGS = [(1, 1, 1, 1), (2, 1, 1, 1), (2, 2, 1, 1), (2, 1, 2, 2), (2, 2, 2, 2),
           (4, 1, 2, 2), (4, 2, 1, 2), (2, 2, 4, 4), (8, 1, 1, 1), (2, 1, 2, 4)]
"""(dp, tp, pp, K)."""


def _check(fn: distir.Function | object, cfg: tuple, hw: object = HW,
           kind: str = "1f1b", peers: int = 1, fold_tp: bool = True) -> ReplicaProgram:
    dp, tp, pp, k = cfg
    one = compose_dtp_replica(fn, dp, tp, pp, k, kind,  # type: ignore[arg-type]
                              fold_tp=fold_tp)
    assert (one.replicas, one.stride, one.peers) == (dp, tp * pp, peers)
    devices = {t.device for t in type_env(one.fn).values() if hasattr(t, "device")}
    assert devices <= set(range(0, tp * pp, peers)), "only replica 0's devices are written"
    assert len(devices) == tp * pp // peers, "one device per written rank of each stage"
    full = compose_dtp(fn, dp, tp, pp, k, kind)  # type: ignore[arg-type]
    assert one.num_ops(inline_calls=True) == full.num_ops(inline_calls=True)
    assert_same_as_every_replica(simulate(one, hw), simulate(full, hw))
    return one


@pytest.mark.parametrize("kind", ["1f1b", "gpipe"])
@pytest.mark.parametrize("cfg", CONFIGS)
def test_mlp_replica_simulates_as_every_replica(cfg: tuple, kind: str) -> None:
    """The MLP's tensor-parallel ranks run alike (no bias added on rank 0 alone): rank 0
    of replica 0 is written (``Peer*`` collectives), or every rank with ``fold_tp``
    off."""
    _check(_mlp(), cfg, kind=kind, peers=cfg[1])
    if cfg[1] > 1:
        _check(_mlp(), cfg, kind=kind, fold_tp=False)


@pytest.mark.parametrize("cfg", CONFIGS[:8])
def test_gpt2_step_replica_simulates_as_every_replica(cfg: tuple) -> None:
    """GPT-2's vocabulary-parallel embedding and loss: each rank's constants (its first
    row, its class ids) are kept apart from equal ones, so the ranks run alike and rank 0
    is written alone (``peers == tp``)."""
    one = _check(_gpt2_step(), cfg, peers=cfg[1])
    assert plan_dtp(_gpt2_step(), *cfg).folds() or cfg[1] == 1
    # the gradients are summed over the replicas by replica 0's parts (ReplicaAllreduce),
    # which describe the replicas as the program was written
    read = replica_program(one.fn)
    assert (read is not None) == (cfg[0] > 1)
    assert read is None or (read.replicas, read.stride) == (one.replicas, one.stride)


@pytest.mark.parametrize("cfg", [(1, 2, 1, 1), (2, 2, 1, 2), (1, 2, 2, 1), (1, 2, 2, 2),
                                 (1, 4, 1, 1), (2, 4, 1, 2), (1, 4, 2, 1), (1, 4, 2, 4)])
def test_built_in_gpt2_training_folds_exactly(cfg: tuple) -> None:
    """The built-in GPT-2 training step (vocabulary-parallel embedding and loss, Adam) at
    T2 and T4, with and without P and K: rank 0 alone (``peers == tp``) simulates as
    the program of every rank, and as replica 0's program of every rank."""
    from distir.models.gpt2 import GPT2Config
    from distir.models.presets import TrainingConfig

    g = GPT2Config(n_layer=2, d_model=32, n_head=4, vocab_size=64, seq_len=8, batch_size=8)
    an = analyze(TrainingConfig(g).build())
    assert plan_dtp(an, *cfg).folds()
    _check(an, cfg, peers=cfg[1])
    _check(an, cfg, fold_tp=False)


def test_gpt2_adam_replica_on_a_multinode_machine() -> None:
    """Replicas of 4 devices on nodes of 2: every stage-to-stage transfer crosses a node
    boundary, on every replica alike; rank 0 of each stage is written alone, and with
    ``fold_tp`` off every rank."""
    from distir.models.gpt2 import GPT2Config
    from distir.models.presets import TrainingConfig

    g = GPT2Config(n_layer=2, d_model=32, n_head=4, vocab_size=64, seq_len=8, batch_size=8)
    an = analyze(TrainingConfig(g).build())
    two = dataclasses.replace(HW, name="two-per-node", devices_per_node=2,
                              inter_node=(LinkSpec(2, 5e7, 2.1),))
    _check(an, (2, 2, 2, 2), hw=two, peers=2)
    _check(an, (2, 2, 2, 2), hw=two, fold_tp=False)


def test_replica_program_takes_replica_0s_parameters() -> None:
    full = compose_dtp(_mlp(), 4, 2, 2, 2)
    one = compose_dtp_replica(_mlp(), 4, 2, 2, 2, fold_tp=False)
    mine = {p.name for p in full.params if p.type.device < 4}  # type: ignore[union-attr]
    assert {p.name for p in one.fn.params} == mine
    assert len(one.fn.returns) * 4 == len(full.returns)
    rank0 = compose_dtp_replica(_mlp(), 4, 2, 2, 2)  # tensor-parallel rank 0's alone
    assert rank0.peers == 2
    assert {p.name for p in rank0.fn.params} == {
        p.name for p in full.params if p.type.device in (0, 2)}  # type: ignore[union-attr]
    assert len(rank0.fn.returns) * 8 == len(full.returns)


def test_self_contained_replica_is_refused() -> None:
    c = plan_dtp(_mlp(), 2, 1, 2, 2)
    with pytest.raises(TransformError, match="one_replica"):
        lower_pipeline(c.assignment, c.stages, c.sched, self_contained=True, one_replica=True)


def test_replica_program_is_fast_at_large_dp() -> None:
    """D64 T2 P2 K4 of the MLP: built and simulated in well under a second, and faster
    than the program of every replica (whose cost grows with ``dp``)."""
    an = analyze(_mlp(batch=256))
    compose_dtp_replica(an, 2, 2, 2, 4)  # warm the op rules' memo for this mesh shape
    t0 = time.perf_counter()
    one = compose_dtp_replica(an, 64, 2, 2, 4)
    s_one = simulate(one, HW)
    t_one = time.perf_counter() - t0
    t0 = time.perf_counter()
    s_full = simulate(compose_dtp(an, 64, 2, 2, 4), HW)
    t_full = time.perf_counter() - t0
    assert s_one.latency_s == pytest.approx(s_full.latency_s, rel=1e-9)
    assert s_one.peak_memory_bytes == s_full.peak_memory_bytes
    assert t_one < 0.5 and t_one < t_full / 3, (t_one, t_full)


@pytest.mark.parametrize("cfg", [(1, 2, 1, 1), (2, 2, 1, 2), (2, 4, 1, 1)])
def test_a_row_parallel_bias_writes_every_rank(cfg: tuple) -> None:
    """Two ``Gemm`` layers with biases, the second row-parallel (its bias added on rank 0
    alone): the ranks do not run alike, every rank is written (``peers`` 1)."""
    an = analyze(_gemm_step())
    assert not plan_dtp(an, *cfg).folds()
    _check(an, cfg)


@pytest.mark.parametrize("cfg", [(2, 1, 1, 2), (2, 1, 2, 2), (4, 1, 2, 2), (2, 2, 2, 2)])
def test_a_grouped_data_shard_gathers_in_replica_0s_program(cfg: tuple) -> None:
    """A gradient split in groups along the data axis and read whole, with microbatches
    (sequence-major attention's): replica 0's microbatch pieces joined group by group,
    ``ReplicaAllgather``'d and put back in group-major order, as every replica's."""
    _check(_sequence_major_step(), cfg, peers=cfg[1])


def test_fold_tp_is_refused_where_ranks_differ() -> None:
    c = plan_dtp(_gemm_step(), 2, 2, 1, 2)
    with pytest.raises(TransformError, match="fold_tp"):
        lower_pipeline(c.assignment, c.stages, c.sched, one_replica=True, fold_tp=True)


def test_folded_replica_is_fast_at_scale() -> None:
    """D16 T8 P4 K4 of the MLP (512 devices): rank 0 of replica 0 (4 devices written),
    built and simulated in well under a second, as the program of every device."""
    an = analyze(_mlp(batch=256))
    compose_dtp_replica(an, 2, 8, 4, 4)  # warm the op rules' memo for this mesh shape
    t0 = time.perf_counter()
    one = compose_dtp_replica(an, 16, 8, 4, 4)
    s_one = simulate(one, HW)
    t_one = time.perf_counter() - t0
    assert one.peers == 8 and len(s_one.devices) == 512
    s_full = simulate(compose_dtp(an, 2, 8, 4, 4), HW)  # D2 whole, as a check of D16
    s_two = simulate(compose_dtp_replica(an, 2, 8, 4, 4), HW)
    assert s_two.latency_s == pytest.approx(s_full.latency_s, rel=1e-9)
    assert s_two.peak_memory_bytes == s_full.peak_memory_bytes
    assert t_one < 0.5, t_one
