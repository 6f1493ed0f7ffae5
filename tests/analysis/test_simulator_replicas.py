"""One replica simulated for all (``distir.analysis.replicas``): the simulation of a
``ReplicaProgram`` equals the simulation of the program of every replica, written out.

The program of every replica is made here from replica 0's by writing each op once per
replica on shifted devices and each ``ReplicaAllreduce`` as one ``MPIAllreduce`` over the
copies (``replicate``), on random programs with calls, Sends and collectives; then
``dtp_replica`` against ``dtp`` on transformed MLP and GPT-2 steps, with host dispatch and
on multi-node machines, and the grid search's rows with and without it.
"""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

import distir
from distir.analysis.hardware import LinkSpec
from distir.analysis.replicas import ReplicaProgram, replicas_run_alike
from distir.analysis.simulator import Simulation, simulate
from distir.errors import ExecutionError, SimulationError
from distir.ir import DType, FunctionBuilder, TensorType
from distir.ir.core import Function, Op, Value
from distir.ir.inline import inline_calls
from distir.ir.schemas import FOLDED_COLLECTIVES
from distir.transforms import analyze, dtp, dtp_replica
from tests.analysis import random_ops as ops
from tests.analysis.test_simulator_calls import HW
from tests.analysis.test_simulator_host import with_host

approx = pytest.approx


def replicate(fn: Function, replicas: int, stride: int) -> Function:
    """The program of every replica of ``fn`` (without calls): each op written once per
    replica, on devices shifted by ``r * stride``, replicas interleaved op by op; a
    ``ReplicaAllreduce`` as one ``MPIAllreduce`` of the replicas' copies."""
    def shift(t: TensorType, r: int) -> TensorType:
        return TensorType(t.dtype, t.shape, t.device + r * stride)

    copies: list[dict[Value, Value]] = [{} for _ in range(replicas)]
    params = []
    for r in range(replicas):
        for p in fn.params:
            assert isinstance(p.type, TensorType)
            q = copies[r][p] = Value(f"{p.name}.r{r}", shift(p.type, r))
            params.append(q)
    ops: list[Op] = []
    for op in fn.ops:
        assert op.callee is None, "inline the calls first"
        if op.op_type == "ReplicaAllreduce":
            outs = [Value(f"{op.outputs[0].name}.r{r}") for r in range(replicas)]
            ops.append(Op("MPIAllreduce", [c[op.inputs[0]] for c in copies], None, outs))
            for c, o in zip(copies, outs):
                c[op.outputs[0]] = o
            continue
        for r, c in enumerate(copies):
            attrs = dict(op.attrs)
            if "device" in attrs:
                attrs["device"] = attrs["device"] + r * stride
            outs = [Value(f"{o.name}.r{r}") for o in op.outputs]
            ops.append(Op(op.op_type, [None if x is None else c[x] for x in op.inputs],
                          attrs or None, outs))
            c.update(zip(op.outputs, outs))
    return Function(fn.name, params, ops, [c[v] for c in copies for v in fn.returns])


def assert_same_as_every_replica(one: Simulation, full: Simulation) -> None:
    """``one`` (a replica program's simulation) is ``full``'s: figures per device, the op
    count, and the trace as a set of (op, devices, start, duration)."""
    assert one.replicas is not None and full.replicas is None
    assert one.latency_s == approx(full.latency_s, rel=1e-12)
    assert one.devices == tuple(sorted(full.devices)) or sorted(one.devices) == sorted(
        full.devices)
    for d in full.devices:
        assert one.compute_s[d] == approx(full.compute_s[d], rel=1e-12, abs=1e-15)
        assert one.comm_s[d] == approx(full.comm_s[d], rel=1e-12, abs=1e-15)
        assert one.idle_s[d] == approx(full.idle_s[d], rel=1e-9, abs=1e-12)
        assert one.peak_memory_bytes[d] == full.peak_memory_bytes[d]
    assert one.host_s.keys() == full.host_s.keys()
    for d in full.host_s:
        assert one.host_s[d] == approx(full.host_s[d], rel=1e-12, abs=1e-15)
    assert one.num_ops == full.num_ops

    def trace(sim: Simulation) -> list[tuple]:
        name = FOLDED_COLLECTIVES
        return sorted((name.get(e[3].op_type, e[3].op_type), tuple(sorted(e[2])),
                       round(e[0], 9), round(e[1], 9)) for e in sim.events())

    assert trace(one) == trace(full)


def _random_replica(seed: int, replicas: int, stride: int) -> Function:
    """A random program of one replica on devices ``0 .. stride - 1``: elementwise ops,
    Sends, all-reduces within the replica, its parts of all-reduces over the replicas
    (``ReplicaAllreduce``), and calls of a callee that names no device (its Send names
    the destination by a value there), called on several devices."""
    rng = random.Random(seed)
    shape = (rng.choice([8, 16, 32]), rng.choice([8, 64]))
    devices = list(range(stride))

    g = FunctionBuilder("pair")
    a, b_ = g.param("a"), g.param("b")
    x = g.op("Exp", g.op("Relu", a))
    y = g.op("Send", x, b_)
    callee = g.ret(g.op("Add", y, g.op("Tanh", b_)), g.op("Neg", x))

    b = FunctionBuilder("main")
    pool = [(b.param(f"x{d}", TensorType(DType.Float32, shape, d)), d) for d in devices]
    for _ in range(70):
        r = rng.random()
        v, d = rng.choice(pool)
        if r < 0.35:
            ops.unary(b, rng, pool, v, d)
        elif r < 0.5:
            ops.binary(b, rng, pool, v, d)
        elif r < 0.6:
            ops.send(b, rng, pool, v, d, devices)
        elif r < 0.7:
            group = [d + k * stride for k in range(replicas)]
            pool.append((b.op("ReplicaAllreduce", v, devices=group), d))
        elif r < 0.8:
            ops.allreduce(b, rng, pool)
        else:
            d2 = rng.choice([x for x in devices if x != d])
            w = rng.choice([p for p, pd in pool if pd == d2])
            s, n = b.call(callee, v, w)
            pool.extend([(s, d2), (n, d)])
    return b.ret(*(v for v, _ in pool[-4:]))


@pytest.mark.parametrize("seed", range(24))
def test_random_replica_programs_simulate_as_every_replica(seed: int) -> None:
    replicas, stride = (2, 3) if seed % 2 else (4, 2)
    fn = _random_replica(seed, replicas, stride)
    full = replicate(inline_calls(fn), replicas, stride)
    hw = with_host(HW, star=0.05, Exp=0.3) if seed % 3 == 0 else HW
    if seed % 4 < 2:  # collectives stretched by the bandwidth-bound compute beside them
        hw = dataclasses.replace(hw, overlap_slowdown=0.2, overlap_comm_slowdown=0.4)
    assert_same_as_every_replica(simulate(ReplicaProgram(fn, replicas, stride), hw),
                                 simulate(full, hw))


def _mlp() -> Function:
    from distir.models import mlp

    return mlp(batch_size=32, input_dim=8, hidden_dim=16, output_dim=8, num_layers=4)


@pytest.mark.parametrize("cfg", [(2, 1, 1, 1, "1f1b"), (4, 1, 2, 2, "1f1b"),
                                 (2, 2, 2, 4, "gpipe"), (4, 2, 1, 2, "1f1b")])
def test_dtp_replica_simulates_as_dtp_mlp(cfg: tuple) -> None:
    an = analyze(_mlp())
    dp, tp, pp, k, schedule = cfg
    one = dtp_replica(an, dp, tp, pp, k, schedule)
    assert one.replicas == dp and one.stride == tp * pp
    full = dtp(an, dp, tp, pp, k, schedule)
    assert one.num_ops(inline_calls=True) == full.num_ops(inline_calls=True)
    for hw in (HW, with_host(HW, star=0.02)):
        assert_same_as_every_replica(simulate(one, hw), simulate(full, hw))


def test_dtp_replica_simulates_as_dtp_gpt2_training_on_a_multinode_machine() -> None:
    """GPT-2 trained with Adam, replicas of 4 devices on nodes of 2 (every stage-to-stage
    transfer of a replica crosses a node boundary, on every replica alike)."""
    from distir.models.gpt2 import GPT2Config
    from distir.models.presets import TrainingConfig

    g = GPT2Config(n_layer=2, d_model=32, n_head=4, vocab_size=64, seq_len=8, batch_size=8)
    an = analyze(TrainingConfig(g).build())
    two = dataclasses.replace(HW, name="two-per-node", devices_per_node=2,
                              inter_node=(LinkSpec(2, 5e7, 2.1),))
    one = dtp_replica(an, 2, 2, 2, 2)
    assert_same_as_every_replica(simulate(one, two), simulate(dtp(an, 2, 2, 2, 2), two))


def test_replicas_that_straddle_nodes_are_refused() -> None:
    three = dataclasses.replace(HW, name="three-per-node", devices_per_node=3,
                                inter_node=(LinkSpec(2, 5e7, 2.1),))
    assert not replicas_run_alike(three, 4, 2)
    assert replicas_run_alike(three, 1, 2) and replicas_run_alike(HW, 4, 2)
    one = dtp_replica(analyze(_mlp()), 4, 1, 2, 2)
    with pytest.raises(SimulationError, match="do not run alike on three-per-node .* "
                       "simulate the program of every replica"):
        simulate(one, three)


def test_a_replica_program_is_checked_and_not_executed() -> None:
    text = """
func @main(%x: Tensor[Float32, (4, 4), 1]) {
  %y = ReplicaAllreduce(%x, devices=[DEVICES])
  return %y
}"""
    ok = distir.parse(text.replace("DEVICES", "1, 3")).entry
    assert distir.infer_types(ok)[0] == TensorType(DType.Float32, (4, 4), 1)
    with pytest.raises(ExecutionError, match="it is for simulation"):
        distir.execute(ok, [np.ones((4, 4), np.float32)])
    for devices, msg in (("0, 2", "not one of devices"), ("1, 1", "lists a device twice")):
        with pytest.raises(distir.DistIRError, match=msg):
            distir.infer_types(distir.parse(text.replace("DEVICES", devices)).entry)
    # A program that places values outside replica 0's devices is not one replica's.
    with pytest.raises(SimulationError, match="outside replica 0's devices 0-0"):
        simulate(ReplicaProgram(ok, 2, 1), HW)


def test_a_replica_program_read_from_a_file_describes_itself(tmp_path, capsys) -> None:
    """``distir transform --one-replica`` writes replica 0's program; ``distir simulate``
    finds its other replicas in its ``ReplicaAllreduce`` ops and reports all of them."""
    import json
    from pathlib import Path

    from distir.analysis.replicas import replica_program
    from distir.cli import main

    one = dtp_replica(analyze(_mlp()), 4, 1, 2, 2)
    rp = replica_program(one.fn)
    assert rp is not None and (rp.replicas, rp.stride) == (4, 2)
    assert replica_program(_mlp()) is None
    a, b = simulate(one.fn, HW), simulate(one, HW)
    assert a.replicas == (4, 2) and a.devices == b.devices and a.latency_s == b.latency_s
    step = str(Path(__file__).resolve().parents[2] / "examples" / "mlp_step.dir")
    out_one, out_all = str(tmp_path / "one.dir"), str(tmp_path / "all.dir")
    assert main(["transform", step, "--dp", "4", "--pp", "2", "-k", "2", "--one-replica",
                 "-o", out_one]) == 0
    assert "replica 0 of 4" in capsys.readouterr().out
    assert main(["transform", step, "--dp", "4", "--pp", "2", "-k", "2", "-o", out_all]) == 0
    capsys.readouterr()
    docs = []
    for path in (out_one, out_all):
        assert main(["simulate", path, "--json"]) == 0
        docs.append(json.loads(capsys.readouterr().out))
    assert docs[0]["devices"] == docs[1]["devices"] == list(range(8))
    assert docs[0]["latency_s"] == pytest.approx(docs[1]["latency_s"], rel=1e-12)
    assert docs[0]["peak_memory_bytes"] == docs[1]["peak_memory_bytes"]
    assert main(["transform", step, "--dp", "2", "--one-replica", "--self-contained"]) != 0
    assert "choose one" in capsys.readouterr().err


def test_replica_groups_that_disagree_are_refused() -> None:
    text = """
func @main(%x: Tensor[Float32, (4, 4), 0], %y: Tensor[Float32, (4, 4), 1]) {
  %a = ReplicaAllreduce(%x, devices=[0, 2, 4])
  %b = ReplicaAllreduce(%y, devices=[1, 5])
  return %a, %b
}"""
    with pytest.raises(SimulationError, match=r"devices=\[1, 5\]\) in @main does not list one "
                       r"device per replica.*others are 3 replicas 2 devices apart"):
        simulate(distir.parse(text).entry, HW)
