"""Per-rank projection: each device's program holds exactly its ops, typed, with the
communication paired across devices in one global order."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

import distir
from distir.analysis.projection import Projection, check_pairing, comm_ops, project
from distir.errors import PlacementError, UnsupportedError
from distir.ir.types import TensorType

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")


def load(name: str) -> distir.Function:
    return distir.load(os.path.join(EXAMPLES, name)).entry


def check_invariants(proj: Projection) -> None:
    check_pairing(proj)
    for prog in proj.programs:
        assert not any(op.callee is not None for op in prog.fn.ops)
        defined = {id(p) for p in prog.fn.params}
        for op in prog.fn.ops:
            for v in op.inputs:
                assert v is None or id(v) in defined, f"{op} uses a value of another rank"
            for v in op.outputs:
                assert isinstance(v.type, TensorType) and v.type.device == prog.device
                defined.add(id(v))
        for p in prog.fn.params:
            assert p.type.device == prog.device
        assert all(id(v) in defined for v in prog.fn.returns)


def test_data_parallel_example() -> None:
    fn = load("mlp_step_dp2.dir")
    proj = project(fn)
    check_invariants(proj)
    assert proj.world_size == 2 and proj.groups == ((0, 1),)
    r0, r1 = proj.programs
    assert r0.param_index == (0, 1, 2, 3, 4) and r1.param_index == ()
    assert r0.return_index == (0, 1, 2) and r1.return_index == ()
    kinds0 = [op.op_type for op in comm_ops(r0)]
    kinds1 = [op.op_type for op in comm_ops(r1)]
    assert kinds0 == kinds1 == ["MPIBroadcast"] * 3 + ["MPIScatter"] * 2 + ["MPIAllreduce"] * 3
    # The root sends, the other rank only receives.
    assert all(len(op.inputs) == 1 for op in comm_ops(r0)[:5])
    assert all(len(op.inputs) == 0 for op in comm_ops(r1)[:5])
    # The replica's compute appears once per device (the call is inlined).
    assert sum(op.op_type == "MatMulGrad" for op in r0.fn.ops) == 3
    assert sum(op.op_type == "MatMulGrad" for op in r1.fn.ops) == 3
    assert r1.fn.ops[5].outputs[0].type.shape == (4, 48)  # half the batch


def test_send_becomes_send_and_recv() -> None:
    proj = project(load("mlp_step_pp2.dir"))
    check_invariants(proj)
    r0, r1 = proj.programs
    c0 = [(op.op_type, op.attrs["seq"], op.attrs["device"]) for op in comm_ops(r0)]
    c1 = [(op.op_type, op.attrs["seq"], op.attrs["device"]) for op in comm_ops(r1)]
    assert c0 == [("Send", 0, 1), ("Send", 1, 1), ("Send", 2, 1), ("Send", 3, 1),
                  ("Recv", 4, 1), ("Recv", 5, 1), ("Recv", 6, 1)]
    assert c1 == [("Recv", 0, 0), ("Recv", 1, 0), ("Recv", 2, 0), ("Recv", 3, 0),
                  ("Send", 4, 0), ("Send", 5, 0), ("Send", 6, 0)]
    sends = [op for op in r0.fn.ops if op.op_type == "Send"]
    assert all(not op.outputs and len(op.inputs) == 1 for op in sends)
    recv = [op for op in r1.fn.ops if op.op_type == "Recv"][0]
    assert recv.outputs[0].type == TensorType(distir.DType.Float32, (48, 12), 1)


def test_results_on_several_devices() -> None:
    shared = os.environ.get("DISTIR_SHARED_EXAMPLES",
                            Path(__file__).resolve().parents[3] / "shared" / "examples")
    path = os.path.join(shared, "mlp_data_parallel_2dev.dir")
    if not os.path.exists(path):
        pytest.skip("shared examples absent")
    proj = project(distir.load(path).entry)
    check_invariants(proj)
    assert proj.programs[0].return_index == (0, 2)
    assert proj.programs[1].return_index == (1, 3)


def test_known_values_are_folded() -> None:
    proj = project(load("gpt2_reshape.dir"))
    ops = proj.programs[0].fn.ops
    assert [op.op_type for op in ops] == ["Constant", "Reshape"]
    assert list(ops[0].attrs["value"].array) == [-1, 768]


PERMUTED = """
func @main(%a: Tensor[Float32, (2, 3), 0], %b: Tensor[Float32, (2, 3), 2]) {
  %g2, %g0 = MPIAllgather(%b, %a, axis=-1)
  %g1 = Send(%g0, device=1)
  %s1, %s2 = MPIReduceScatter(%g1, %g2, axis=0)
  %r2, %r0 = MPIBroadcast(%s1, devices=[2, 0])
  %y = MPIReduce(%r0, %r2, device=1)
  return %y
}
"""


def test_collective_attributes() -> None:
    proj = project(distir.parse(PERMUTED).entry)
    check_invariants(proj)
    assert proj.groups == ((0, 2), (0, 1), (1, 2), (0, 1, 2))
    ag = comm_ops(proj.programs[0])[0]
    assert ag.op_type == "MPIAllgather"
    assert ag.attrs["order"] == (2, 0) and ag.attrs["group"] == (0, 2)
    assert ag.attrs["axis"] == 1 and ag.attrs["sizes"] == (3, 3)
    rs = comm_ops(proj.programs[2])[1]
    assert rs.op_type == "MPIReduceScatter" and rs.attrs["order"] == (1, 2)
    assert rs.outputs[0].type.shape == (1, 6)
    bc = comm_ops(proj.programs[1])[2]
    assert bc.op_type == "MPIBroadcast" and bc.attrs["root"] == 1
    assert bc.attrs["devices"] == (2, 0) and bc.attrs["group"] == (0, 1, 2)
    assert len(bc.inputs) == 1 and not bc.outputs  # the root is not a destination
    red = comm_ops(proj.programs[1])[3]
    assert red.op_type == "MPIReduce" and red.attrs["order"] == (0, 2)
    assert not red.inputs and len(red.outputs) == 1  # the destination is not a source
    assert proj.programs[1].return_index == (0,)


def test_one_participant_is_identity() -> None:
    text = """
func @main(%x: Tensor[Float32, (4,), 0]) {
  %y = MPIAllreduce(%x)
  %z = MPIBroadcast(%y, devices=[0])
  return %z
}"""
    proj = project(distir.parse(text).entry)
    assert [op.op_type for op in proj.programs[0].fn.ops] == ["Identity", "Identity"]
    assert proj.groups == () and proj.num_comm == 0


def test_world_size() -> None:
    fn = load("mlp_step_pp2.dir")
    proj = project(fn, world_size=4)
    assert proj.world_size == 4
    assert not proj.programs[3].fn.ops and not proj.programs[3].fn.params
    with pytest.raises(PlacementError, match="uses device 1, but the world size is 1"):
        project(fn, world_size=1)


def test_pairing_check_finds_a_missing_participant() -> None:
    proj = project(load("mlp_step_dp2.dir"))
    r1 = proj.programs[1]
    r1.fn.ops = [op for op in r1.fn.ops if op.attrs.get("seq") != 6]
    with pytest.raises(UnsupportedError, match=r"communication 6 .* missing from devices \[1\]"):
        check_pairing(proj)


def test_type_errors_keep_their_place() -> None:
    text = """func @main(%x: Tensor[Float32, (4,), 0], %y: Tensor[Float32, (4,), 1]) {
  %z = Add(%x, %y)
  return %z
}"""
    with pytest.raises(PlacementError, match=r"<string>:2:\d+"):
        project(distir.parse(text).entry)


def test_projection_pickles_without_the_parser() -> None:
    """Where the workers lack ``lark``, they get pickled programs; unpickling must not need
    ``lark`` or ``torch``."""
    proj = project(load("mlp_step_pp2.dir"))
    blob = pickle.dumps(proj)
    again = pickle.loads(blob)
    assert distir.dumps(again.programs[1].fn) == distir.dumps(proj.programs[1].fn)
    code = ("import pickle, sys; sys.modules['lark'] = None; "
            "p = pickle.loads(sys.stdin.buffer.read()); "
            "assert 'torch' not in sys.modules; "
            "print(len(p.programs), p.num_comm)")
    out = subprocess.run([sys.executable, "-c", code], input=blob, capture_output=True,
                         cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout.decode().split() == ["2", "7"]


@pytest.mark.parametrize("name", ["mlp_step_dp2.dir", "mlp_step_pp2.dir"])
def test_some_devices_only(name: str) -> None:
    """``devices=``: the programs of those devices as the full projection writes them,
    every other device's with its parameters and no op (what the allocator's replay
    reads, at a fraction of the cost)."""
    fn = load(name)
    full = project(fn)
    for keep in ([0], [1]):
        part = project(fn, devices=keep)
        assert part.world_size == full.world_size and part.groups == full.groups
        for a, b in zip(full.programs, part.programs, strict=True):
            assert (a.param_index, a.return_index) == (b.param_index, b.return_index)
            if a.device in keep:
                assert distir.dumps(a.fn) == distir.dumps(b.fn)
            else:
                assert b.fn.ops == [] and len(b.fn.params) == len(a.fn.params)
