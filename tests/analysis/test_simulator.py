"""Semantics of the simulator on a synthetic profile with fixed costs.

The ``UNIT`` profile makes every kernel cost exactly its launch overhead, 1 s (infinite
FLOP/s and bandwidth), a ``Send`` 2 s (launch + one step of 1 s latency), a 2-device
allreduce 3 s (launch + 2 steps) and a 2-device broadcast or scatter 2 s; views cost 0.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import distir
from distir.analysis.hardware import Hardware, LinkSpec
from distir.analysis.simulator import Simulation, simulate

ROOT = Path(__file__).resolve().parents[2]
INF = 1e300

UNIT = Hardware(name="unit", memory_bytes=1 << 40, peak_flops=(("Float32", INF),),
                memory_bandwidth=INF, launch_overhead=1.0, devices_per_node=1 << 20,
                intra_node=(LinkSpec(2, INF, 1.0),), inter_node=())


def sim_text(text: str, hw: Hardware = UNIT, **kw: object) -> Simulation:
    return simulate(distir.parse(text), hw, **kw)  # type: ignore[arg-type]


def timeline(sim: Simulation) -> list[tuple[str, float, float, tuple[int, ...]]]:
    return [(op.op_type, start, start + secs, devs)
            for start, secs, devs, op, _, _ in sim.events()]


T = "Tensor[Float32, (4, 4), {}]"


def test_independent_ops_on_two_devices_overlap() -> None:
    sim = sim_text(f"""
func @main(%x: {T.format(0)}, %y: {T.format(1)}) {{
  %a = Relu(%x)
  %b = Relu(%y)
  %c = Relu(%a)
  %d = Relu(%b)
  return %c, %d
}}""")
    assert sim.latency_s == 2.0
    assert sim.busy_s == {0: 2.0, 1: 2.0}
    assert sim.idle_s == {0: 0.0, 1: 0.0}
    assert timeline(sim) == [("Relu", 0.0, 1.0, (0,)), ("Relu", 0.0, 1.0, (1,)),
                             ("Relu", 1.0, 2.0, (0,)), ("Relu", 1.0, 2.0, (1,))]


def test_send_synchronizes_its_devices() -> None:
    sim = sim_text(f"""
func @main(%x: {T.format(0)}, %y: {T.format(1)}) {{
  %a = Relu(%x)
  %b = Relu(%y)
  %c = Relu(%a)
  %d = Relu(%c)
  %e = Send(%d, device=1)
  %f = Add(%e, %b)
  return %f
}}""")
    # Device 1 finishes Relu(y) at 1, then waits for device 0 (free at 3) to send.
    assert timeline(sim) == [("Relu", 0.0, 1.0, (0,)), ("Relu", 0.0, 1.0, (1,)),
                             ("Relu", 1.0, 2.0, (0,)), ("Relu", 2.0, 3.0, (0,)),
                             ("Send", 3.0, 5.0, (0, 1)), ("Add", 5.0, 6.0, (1,))]
    assert sim.latency_s == 6.0
    assert sim.comm_s == {0: 2.0, 1: 2.0}
    assert sim.compute_s == {0: 3.0, 1: 2.0}
    assert sim.idle_s == {0: 1.0, 1: 2.0}


def test_collective_synchronizes_and_later_ops_overlap() -> None:
    sim = sim_text(f"""
func @main(%x: {T.format(0)}, %y: {T.format(1)}) {{
  %a = Relu(%x)
  %b = Relu(%a)
  %c = Relu(%y)
  %s0, %s1 = MPIAllreduce(%b, %c)
  %d = Relu(%s0)
  %e = Relu(%s1)
  return %d, %e
}}""")
    assert timeline(sim) == [("Relu", 0.0, 1.0, (0,)), ("Relu", 1.0, 2.0, (0,)),
                             ("Relu", 0.0, 1.0, (1,)), ("MPIAllreduce", 2.0, 5.0, (0, 1)),
                             ("Relu", 5.0, 6.0, (0,)), ("Relu", 5.0, 6.0, (1,))]
    assert sim.latency_s == 6.0
    assert sim.idle_s == {0: 0.0, 1: 1.0}


def test_pipelined_mlp_step_matches_hand_computed_timeline() -> None:
    """examples/mlp_step_pp2.dir: stage 0 on device 0, stage 1 on device 1, 2 microbatches
    in GPipe order, 7 Sends of 2 s; every kernel 1 s, MatMulGrad two kernels (2 s), or one
    where its first result is never used (``_, %dw1 = MatMulGrad(...)``: 1 s)."""
    m = distir.load(str(ROOT / "examples" / "mlp_step_pp2.dir"))
    sim = simulate(m, UNIT, batch_size=8)
    spans: dict[int, list[tuple[str, float, float, str]]] = {0: [], 1: []}
    for start, secs, devs, op, _, fname in sim.events():
        for d in devs:
            spans[d].append((op.op_type, start, start + secs, fname))

    def stage(fname: str, kinds: list[str], t: float) -> list[tuple[str, float, float, str]]:
        out = []
        for k in kinds:
            dur = 2.0 if k == "MatMulGrad" else 1.0
            out.append((k.rstrip("_"), t, t + dur, fname))
            t += dur
        return out

    def main(kind: str, t0: float, t1: float) -> tuple[str, float, float, str]:
        return (kind, t0, t1, "main")

    fwd0 = ["MatMul", "Relu", "MatMul", "Relu"]              # 4 s
    bwd0 = ["ReluGrad", "MatMulGrad", "ReluGrad", "MatMulGrad_"]  # 5 s ("_": da unused)
    st1 = ["MatMul", "MSELossGrad", "MatMulGrad"]            # 4 s
    sends = [main("Send", 0, 2), main("Send", 2, 4), main("Split", 4, 4)]
    assert spans[0] == [
        *sends, *stage("stage0", fwd0, 4), main("Send", 8, 10),
        *stage("stage0", fwd0, 10), main("Send", 14, 16),
        main("Send", 24, 26), *stage("stage0_grad", bwd0, 26),
        main("Send", 31, 33), *stage("stage0_grad", bwd0, 33),
        main("Sum", 38, 39), main("Sum", 39, 40),
        main("SGDOptimizer", 40, 41), main("SGDOptimizer", 41, 42), main("Send", 42, 44)]
    assert spans[1] == [
        *sends, main("Send", 8, 10), main("Send", 14, 16),
        *stage("stage1", st1, 16), *stage("stage1", st1, 20), main("Send", 24, 26),
        main("Send", 31, 33), main("Sum", 33, 34), main("SGDOptimizer", 34, 35),
        main("Send", 42, 44)]
    assert sim.latency_s == 44.0
    assert sim.comm_s == {0: 14.0, 1: 14.0}
    assert sim.compute_s == {0: 22.0, 1: 10.0}
    assert sim.idle_s == {0: 8.0, 1: 20.0}
    assert sim.throughput == pytest.approx(8 / 44.0)
    assert sim.num_ops == len(sim.events()) == 37


def test_views_cost_nothing_and_comm_is_counted_apart() -> None:
    sim = sim_text(f"""
func @main(%x: {T.format(0)}) {{
  %s = Constant(value=dense<Int64>[16])
  %r = Reshape(%x, %s)
  %t = Transpose(%x, perm=[1, 0])
  %a = Relu(%t)
  %b0, %b1 = MPIBroadcast(%a, devices=[0, 1])
  return %r, %b1
}}""")
    assert sim.latency_s == 3.0
    assert sim.compute_s == {0: 1.0, 1: 0.0}
    assert sim.comm_s == {0: 2.0, 1: 2.0}


def test_throughput_and_to_dict() -> None:
    sim = sim_text(f"func @main(%x: {T.format(0)}) {{\n  %a = Relu(%x)\n  return %a\n}}",
                   batch_size=4)
    assert sim.throughput == 4.0
    d = sim.to_dict()
    json.dumps(d)
    assert d["latency_s"] == 1.0 and d["peak_memory_bytes"] == {"0": 128}
    assert d["throughput_samples_per_s"] == 4.0 and d["hardware"] == "unit"
    assert sim_text(f"func @main(%x: {T.format(0)}) {{\n  return %x\n}}").throughput is None


def test_chrome_trace_is_valid(tmp_path: Path) -> None:
    m = distir.load(str(ROOT / "examples" / "mlp_step_pp2.dir"))
    sim = simulate(m, UNIT)
    path = tmp_path / "trace.json"
    sim.write_trace(str(path))
    doc = json.loads(path.read_text())
    evs = doc["traceEvents"]
    meta = [e for e in evs if e["ph"] == "M"]
    ops = [e for e in evs if e["ph"] == "X"]
    names = {e["tid"]: e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    assert names == {0: "device 0", 1: "device 1"}
    assert any(e["name"] == "process_name" for e in meta)
    for e in evs:
        assert isinstance(e["name"], str) and isinstance(e["pid"], int)
        assert isinstance(e["tid"], int)
    for e in ops:
        assert e["ts"] >= 0 and e["dur"] >= 0 and e["cat"] in ("compute", "comm")
        assert {"op", "function", "inputs", "outputs", "cost_s", "flops", "bytes"} <= set(
            e["args"])
    # One event per device an op runs on; the end of the last is the latency.
    assert len(ops) == sum(len(devs) for _, _, devs, *_ in sim.events())
    assert max(e["ts"] + e["dur"] for e in ops) == pytest.approx(sim.latency_s * 1e6)
    sends = [e for e in ops if e["name"] == "Send"]
    assert sends[0]["args"]["inputs"] == ["Tensor[Float32, (48, 12), 0]"]
    assert sends[0]["args"]["outputs"] == ["Tensor[Float32, (48, 12), 1]"]
    # Events on one track never overlap.
    for d in (0, 1):
        track = sorted((e["ts"], e["ts"] + e["dur"]) for e in ops if e["tid"] == d)
        assert all(a[1] <= b[0] + 1e-9 for a, b in zip(track, track[1:]))


def test_profiles_give_plausible_times() -> None:
    m = distir.load(str(ROOT / "examples" / "mlp_step_dp2.dir"))
    # The analytic (datasheet) H100 profile: the shipped h100-sxm is calibrated, and fitted
    # costs of tiny kernels are not comparable with the V100's analytic ones.
    h100 = simulate(m, "h100-sxm-datasheet")
    v100 = simulate(m, "dgx2-v100")
    assert 0 < h100.latency_s < 1e-2 and 0 < v100.latency_s < 1e-2
    assert all(math.isfinite(x) for x in h100.busy_s.values())
    assert h100.hardware.name == "h100-sxm-datasheet" and v100.hardware.name == "dgx2-v100"
    assert 0 < simulate(m, "h100-sxm").latency_s < 1e-2
    # The V100's lower peak FLOP/s and link bandwidth make the same step slower.
    assert v100.latency_s > h100.latency_s


def test_bad_batch_size_is_an_error() -> None:
    with pytest.raises(distir.DistIRError, match="batch size"):
        sim_text(f"func @main(%x: {T.format(0)}) {{\n  return %x\n}}", batch_size=0)


def test_declared_types_are_checked() -> None:
    with pytest.raises(distir.DistIRError, match=r"%a is declared .* but is"):
        sim_text(f"""
func @main(%x: {T.format(0)}) {{
  %a: {T.format(1)} = Relu(%x)
  return %a
}}""")
