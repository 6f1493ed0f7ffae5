"""Tensor-parallel ranks simulated once (``distir.analysis.replicas``): the simulation of
a ``ReplicaProgram`` with ``peers`` equals the simulation of the program of every
(replica, rank) copy, written out.

The program of every copy is made here from rank 0's (``every_copy``: each op once per
copy on shifted devices, each ``Peer*`` op as one collective over the ranks' copies, each
``ReplicaAllreduce`` as one ``MPIAllreduce`` per rank), on random programs with calls,
Sends and collectives; then ``dtp_replica`` against ``dtp`` on MLP and GPT-2 steps, where
the ranks run alike (written once) and where they do not (written out, still exact).
"""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

import distir
from distir.analysis.hardware import LinkSpec
from distir.analysis.replicas import ReplicaProgram, peers_run_alike, replica_program
from distir.analysis.simulator import simulate
from distir.errors import ExecutionError, SimulationError
from distir.ir import DType, FunctionBuilder, TensorType
from distir.ir.core import Function, Op, Value
from distir.ir.inline import inline_calls
from distir.ir.types import DenseAttr
from distir.transforms import analyze, dtp, dtp_replica, tower
from distir.transforms.plan import Plan
from tests.analysis import random_ops as ops
from tests.analysis.test_simulator_calls import HW
from tests.analysis.test_simulator_host import with_host
from tests.analysis.test_simulator_replicas import assert_same_as_every_replica

_STANDS_FOR = {"PeerAllreduce": "MPIAllreduce", "PeerAllgather": "MPIAllgather"}


def every_copy(fn: Function, replicas: int, stride: int, peers: int) -> Function:
    """The program of every copy of ``fn`` (without calls): each op once per (replica
    ``r``, rank ``t``), on devices shifted by ``r * stride + t``; a ``Peer*`` op as one
    ``MPIAllreduce``/``MPIAllgather`` of the ranks' copies (per replica), a
    ``ReplicaAllreduce`` as one ``MPIAllreduce`` of the replicas' copies (per rank)."""
    copies = [(r, t) for r in range(replicas) for t in range(peers)]
    env: dict[tuple[int, int], dict[Value, Value]] = {c: {} for c in copies}
    params = []
    for r, t in copies:
        for p in fn.params:
            assert isinstance(p.type, TensorType)
            ty = TensorType(p.type.dtype, p.type.shape, p.type.device + r * stride + t)
            q = env[(r, t)][p] = Value(f"{p.name}.{r}.{t}", ty)
            params.append(q)
    body: list[Op] = []

    def collective(op_type: str, group: list[tuple[int, int]], op: Op, attrs: dict) -> None:
        outs = [Value(f"{op.outputs[0].name}.{r}.{t}") for r, t in group]
        body.append(Op(op_type, [env[c][op.inputs[0]] for c in group], attrs or None, outs))
        for c, o in zip(group, outs):
            env[c][op.outputs[0]] = o

    for op in fn.ops:
        assert op.callee is None, "inline the calls first"
        if op.op_type in _STANDS_FOR:
            attrs = {k: v for k, v in op.attrs.items() if k != "peers"}
            for r in range(replicas):
                collective(_STANDS_FOR[op.op_type], [(r, t) for t in range(peers)], op, attrs)
            continue
        if op.op_type == "ReplicaAllreduce":
            for t in range(peers):
                collective("MPIAllreduce", [(r, t) for r in range(replicas)], op, {})
            continue
        for c in copies:
            attrs = dict(op.attrs)
            if "device" in attrs:
                attrs["device"] = attrs["device"] + c[0] * stride + c[1]
            outs = [Value(f"{o.name}.{c[0]}.{c[1]}") for o in op.outputs]
            body.append(Op(op.op_type, [None if x is None else env[c][x] for x in op.inputs],
                           attrs or None, outs))
            env[c].update(zip(op.outputs, outs))
    return Function(fn.name, params, body, [env[c][v] for c in copies for v in fn.returns])


def _random_rank0(seed: int, replicas: int, stride: int, peers: int) -> Function:
    """A random program of rank 0 of replica 0: values on the devices ``0, peers, ...``
    below ``stride``; elementwise ops, Sends, all-reduces among those devices, rank 0's
    parts of collectives over the ranks (``PeerAllreduce``, ``PeerAllgather``) and over
    the replicas (``ReplicaAllreduce``), and calls of a callee that names no device."""
    rng = random.Random(seed)
    shape = (rng.choice([8, 16]), rng.choice([8, 32]))
    devices = list(range(0, stride, peers))

    g = FunctionBuilder("pair")
    a, b_ = g.param("a"), g.param("b")
    x = g.op("Exp", g.op("PeerAllreduce", g.op("Relu", a), peers=peers))
    y = g.op("Send", x, b_)
    callee = g.ret(g.op("Add", y, g.op("Tanh", b_)), g.op("Neg", x))

    b = FunctionBuilder("main")
    pool = [(b.param(f"x{d}", TensorType(DType.Float32, shape, d)), d) for d in devices]
    for _ in range(60):
        r = rng.random()
        v, d = rng.choice(pool)
        if r < 0.3:
            ops.unary(b, rng, pool, v, d)
        elif r < 0.45:
            ops.binary(b, rng, pool, v, d)
        elif r < 0.55 and len(devices) > 1:
            ops.send(b, rng, pool, v, d, devices)
        elif r < 0.65:
            pool.append((b.op("PeerAllreduce", v, peers=peers), d))
        elif r < 0.7:
            # Gathered along axis 1 and sliced back, so that shapes stay equal.
            w = b.op("PeerAllgather", v, axis=1, peers=peers)
            axes = b.op("Constant", value=DenseAttr.from_array(np.array([1], np.int64)),
                        device=d)
            pool.append((b.op("Add", v, b.op("ReduceSum", w, axes, keepdims=1)), d))
        elif r < 0.78 and replicas > 1:
            group = [d + k * stride for k in range(replicas)]
            pool.append((b.op("ReplicaAllreduce", v, devices=group), d))
        elif r < 0.85:
            ops.allreduce(b, rng, pool)
        elif len(devices) > 1:
            d2 = rng.choice([x for x in devices if x != d])
            w = rng.choice([p for p, pd in pool if pd == d2])
            s, n = b.call(callee, v, w)
            pool.extend([(s, d2), (n, d)])
    return b.ret(*(v for v, _ in pool[-4:]))


@pytest.mark.parametrize("seed", range(16))
def test_random_rank_programs_simulate_as_every_copy(seed: int) -> None:
    replicas, stride, peers = [(1, 4, 2), (2, 4, 2), (2, 8, 4), (3, 4, 2)][seed % 4]
    fn = _random_rank0(seed, replicas, stride, peers)
    full = every_copy(inline_calls(fn), replicas, stride, peers)
    hw = with_host(HW, star=0.05, Exp=0.3, MPIAllreduce=0.2) if seed % 3 == 0 else HW
    one = ReplicaProgram(fn, replicas, stride, peers)
    assert_same_as_every_replica(simulate(one, hw), simulate(full, hw))


def _mlp() -> Function:
    from distir.models import mlp

    return mlp(batch_size=32, input_dim=8, hidden_dim=16, output_dim=8, num_layers=4)


def _gpt2(train: bool, vocab: int = 63) -> Function:
    from distir.models.gpt2 import GPT2Config
    from distir.models.presets import TrainingConfig

    g = GPT2Config(n_layer=2, d_model=32, n_head=4, vocab_size=vocab, seq_len=8,
                   batch_size=8)
    return TrainingConfig(g).build() if train else g.build()


CONFIGS = [(1, 2, 1, 1), (2, 2, 2, 2), (1, 4, 2, 2), (2, 4, 1, 2), (2, 2, 1, 1)]


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("model", ["mlp", "gpt2-train", "gpt2-train-vocab"])
def test_dtp_replica_writes_rank_0_and_simulates_as_dtp(model: str, cfg: tuple) -> None:
    """Training steps whose ranks run alike: rank 0 written alone (``peers == tp``), its
    simulation that of every replica and rank (figures, op count, trace), with host
    dispatch too. A vocabulary that the ranks split (64 rows) makes vocabulary-parallel
    ops, whose constants of each rank are kept apart from equal ones: alike too."""
    an = analyze(_mlp() if model == "mlp" else _gpt2(True, vocab=64 if "vocab" in model
                                                      else 63))
    dp, tp, pp, k = cfg
    one = dtp_replica(an, dp, tp, pp, k)
    assert (one.replicas, one.stride, one.peers) == (dp, tp * pp, tp)
    full = dtp(an, dp, tp, pp, k)
    assert one.num_ops(inline_calls=True) == full.num_ops(inline_calls=True)
    # (the collectives over the ranks are written once in both)
    assert one.fn.num_ops(inline_calls=True) * tp < full.num_ops(inline_calls=True) * 1.5
    for hw in (HW, with_host(HW, star=0.02, MPIAllreduce=0.05)):
        assert_same_as_every_replica(simulate(one, hw), simulate(full, hw))
    unfolded = dtp_replica(an, dp, tp, pp, k, fold_tp=False)
    assert unfolded.peers == 1
    assert_same_as_every_replica(simulate(unfolded, HW), simulate(full, HW))


def test_rank_0_on_a_multinode_machine() -> None:
    """Nodes of 2 devices, each holding one group of 2 ranks: every stage-to-stage
    transfer crosses a node boundary, on every rank alike."""
    two = dataclasses.replace(HW, name="two-per-node", devices_per_node=2,
                              inter_node=(LinkSpec(2, 5e7, 2.1),))
    an = analyze(_gpt2(True))
    one = dtp_replica(an, 2, 2, 2, 2)
    assert one.peers == 2
    assert_same_as_every_replica(simulate(one, two), simulate(dtp(an, 2, 2, 2, 2), two))


@pytest.mark.parametrize("cfg", [(1, 2, 1, 2), (2, 2, 2, 2), (1, 4, 2, 1)])
def test_ranks_that_do_not_run_alike_are_written_out_and_exact(cfg: tuple) -> None:
    """An inference step returns its logits, whole, from rank 0 alone (which keeps them to
    the end, and with K > 1 concatenates them): every rank is written, and the
    simulation is still every rank's."""
    an = analyze(_gpt2(False))
    one = tower.dtp_replica(an, *cfg)  # the builder tower: every rank written
    assert one.peers == 1
    assert_same_as_every_replica(simulate(one, HW), simulate(tower.dtp(an, *cfg), HW))
    # the passes keep the logits split over the ranks until the end, so their ranks run
    # alike and fold, exactly too
    one = dtp_replica(an, *cfg)
    assert one.peers == cfg[1]
    assert_same_as_every_replica(simulate(one, HW), simulate(dtp(an, *cfg), HW))


def _gemm_step() -> Function:
    """A training step of two ``Gemm`` layers with biases: the second is row-parallel,
    its bias added on rank 0 only."""
    from distir.transforms.training import training_step

    b = FunctionBuilder("gemms")
    x = b.param("x", TensorType(DType.Float32, (8, 16), 0))
    w1 = b.param("w1", TensorType(DType.Float32, (16, 32), 0))
    b1 = b.param("b1", TensorType(DType.Float32, (32,), 0))
    w2 = b.param("w2", TensorType(DType.Float32, (32, 16), 0))
    b2 = b.param("b2", TensorType(DType.Float32, (16,), 0))
    h = b.op("Relu", b.op("Gemm", x, w1, b1))
    fn = b.ret(b.op("Gemm", h, w2, b2))
    return training_step(fn, loss="mse", wrt=["w1", "b1", "w2", "b2"])


def test_a_row_parallel_bias_writes_every_rank() -> None:
    an = analyze(_gemm_step())
    plan = Plan(an, 2, 2, 1, 2, "1f1b", one_replica=True, one_rank=True)
    assert plan.written_tp == 2  # rank 0 adds the bias, the others do not
    one = tower.dtp_replica(an, 2, 2, 1, 2)
    assert one.peers == 1
    assert any(op.op_type == "Gemm" and len(op.inputs) == 2 for f in (one.fn, *one.fn.callees())
               for op in f.ops)
    assert_same_as_every_replica(simulate(one, HW), simulate(tower.dtp(an, 2, 2, 1, 2), HW))
    one = dtp_replica(an, 2, 2, 1, 2)  # the passes likewise (pipeline.ranks_alike)
    assert one.peers == 1
    assert_same_as_every_replica(simulate(one, HW), simulate(dtp(an, 2, 2, 1, 2), HW))
    assert Plan(analyze(_mlp()), 1, 2, 1, 1, "1f1b", one_rank=True).written_tp == 1


def test_a_rank_program_read_from_a_file_describes_itself(tmp_path, capsys) -> None:
    """``distir transform --one-replica`` writes rank 0 of replica 0; the printed program,
    parsed back, finds its replicas and ranks in its ops and simulates as every copy."""
    import json
    from pathlib import Path

    from distir.cli import main

    one = dtp_replica(analyze(_mlp()), 2, 2, 2, 2)
    back = distir.parse(distir.dumps(one.fn)).entry
    rp = replica_program(back)
    assert rp is not None and (rp.replicas, rp.stride, rp.peers) == (2, 4, 2)
    a, b = simulate(back, HW), simulate(one, HW)
    assert (a.replicas, a.peers) == ((2, 4), 2)
    assert a.devices == b.devices == tuple(range(8)) and a.latency_s == b.latency_s
    assert a.peak_memory_bytes == b.peak_memory_bytes and a.busy_s == b.busy_s
    dp1 = replica_program(distir.parse(distir.dumps(dtp_replica(analyze(_mlp()), 1, 4, 2,
                                                                2).fn)).entry)
    assert dp1 is not None and (dp1.replicas, dp1.peers) == (1, 4)
    step = str(Path(__file__).resolve().parents[2] / "examples" / "mlp_step.dir")
    out_one, out_all = str(tmp_path / "one.dir"), str(tmp_path / "all.dir")
    args = [step, "--dp", "2", "--tp", "2", "--pp", "2", "-k", "2"]
    assert main(["transform", *args, "--one-replica", "-o", out_one]) == 0
    assert "tensor-parallel rank 0 of 2; replica 0 of 2" in capsys.readouterr().out
    assert main(["transform", *args, "-o", out_all]) == 0
    capsys.readouterr()
    docs = []
    for path in (out_one, out_all):
        assert main(["simulate", path, "--json"]) == 0
        docs.append(json.loads(capsys.readouterr().out))
    assert docs[0]["devices"] == docs[1]["devices"] == list(range(8))
    assert docs[0]["latency_s"] == pytest.approx(docs[1]["latency_s"], rel=1e-12)
    assert docs[0]["peak_memory_bytes"] == docs[1]["peak_memory_bytes"]
    assert docs[0]["num_ops"] == docs[1]["num_ops"]


def test_ranks_that_straddle_nodes_are_refused() -> None:
    three = dataclasses.replace(HW, name="three-per-node", devices_per_node=3,
                                inter_node=(LinkSpec(2, 5e7, 2.1),))
    assert not peers_run_alike(three, 2)
    assert peers_run_alike(three, 1) and peers_run_alike(three, 6) and peers_run_alike(HW, 4)
    one = dtp_replica(analyze(_mlp()), 1, 2, 1, 1)
    with pytest.raises(SimulationError, match="2 tensor-parallel ranks of @.* do not run "
                       "alike on three-per-node .* simulate the program of every rank"):
        simulate(one, three)


def test_peer_ops_are_typed_timed_and_not_executed() -> None:
    text = """
func @main(%x: Tensor[Float32, (4, 6), 2]) {
  %y = PeerAllreduce(%x, peers=2)
  %z = PeerAllgather(%x, axis=1, peers=2)
  return %y, %z
}"""
    fn = distir.parse(text).entry
    assert distir.infer_types(fn) == (TensorType(DType.Float32, (4, 6), 2),
                                      TensorType(DType.Float32, (4, 12), 2))
    with pytest.raises(ExecutionError, match="PeerAllreduce combines values of "
                       "tensor-parallel ranks .* execute the program of every rank"):
        distir.execute(fn, [np.ones((4, 6), np.float32)])
    # Timed as the collectives of the program of every rank, on the input's device and
    # the next one.
    full = """
func @main(%x: Tensor[Float32, (4, 6), 2], %x1: Tensor[Float32, (4, 6), 3]) {
  %y, %y1 = MPIAllreduce(%x, %x1)
  %z, %z1 = MPIAllgather(%x, %x1, axis=1)
  return %y, %z
}"""
    a = {e[3].op_type: e[1] for e in simulate(fn, HW).events()}
    b = {e[3].op_type: e[1] for e in simulate(distir.parse(full).entry, HW).events()}
    assert a["PeerAllreduce"] == b["MPIAllreduce"] and a["PeerAllgather"] == b["MPIAllgather"]
    bad = text.replace("peers=2)\n  %z", "peers=4)\n  %z")
    with pytest.raises(SimulationError, match=r"PeerAllgather\(peers=2\) .* others are over 4 "
                       "ranks"):
        simulate(distir.parse(bad).entry, HW)


def test_rank_0_joins_the_groups_it_joins_in_every_ranks_program() -> None:
    """The allocator counts each rank's communicators from the projection of the program
    (``distir.analysis.allocator.near_capacity``): rank 0's ``Peer*`` ops join its group."""
    from distir.analysis.projection import project

    an = analyze(_gpt2(True))
    for cfg in [(2, 2, 2, 2), (1, 4, 2, 2)]:
        one, full = dtp_replica(an, *cfg), dtp(an, *cfg)
        mine = {tuple(sorted(g)) for g in project(one.fn).groups} | {
            tuple(sorted(op.attrs["devices"])) for op in one.fn.ops  # type: ignore[arg-type]
            if op.op_type == "ReplicaAllreduce"}
        every = {tuple(sorted(g)) for g in project(full).groups}
        for d in range(0, cfg[1] * cfg[2], cfg[1]):
            assert sorted(g for g in mine if d in g) == sorted(g for g in every if d in g)


def test_replicas_of_part_of_a_group_of_ranks_are_refused() -> None:
    text = """
func @main(%x: Tensor[Float32, (4, 4), 0]) {
  %y = PeerAllreduce(%x, peers=2)
  %z = ReplicaAllreduce(%y, devices=[0, 3])
  return %z
}"""
    with pytest.raises(SimulationError, match="replicas are 3 devices apart, not a whole "
                       "number of groups of 2 tensor-parallel ranks"):
        simulate(distir.parse(text).entry, HW)
    rp = replica_program(distir.parse(text.replace("3]", "4]")).entry)
    assert rp is not None and (rp.replicas, rp.stride, rp.peers) == (2, 4, 2)
