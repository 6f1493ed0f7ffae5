"""Overlapped communication: ``MPIAllreduce`` runs on each device's communication stream
(``ASYNC_OPS``), beside the compute, until the first op that reads its result.

Costs as in ``test_simulator``'s ``UNIT`` profile: every kernel 1 s, a 2-device allreduce
3 s, a ``Send`` 2 s.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import distir
from distir.analysis.simulator import simulate
from distir.ir.inline import inline_calls
from distir.ir.schemas import ASYNC_OPS
from tests.analysis.test_simulator import UNIT, sim_text, timeline

T = "Tensor[Float32, (4, 4), {}]"
OVERLAP = f"""
func @main(%x: {T.format(0)}, %y: {T.format(1)}) {{
  %s0, %s1 = MPIAllreduce(%x, %y)
  %a = Relu(%x)
  %b = Relu(%a)
  %c = Relu(%y)
  %d = Add(%b, %s0)
  %e = Add(%c, %s1)
  return %d, %e
}}"""


def test_compute_runs_beside_the_allreduce_until_its_result_is_read() -> None:
    sim = sim_text(OVERLAP)
    # The allreduce runs 0-3 on the communication streams; the Relus beside it; each Add
    # waits for it (device 0 is busy until 2, device 1 until 1).
    assert timeline(sim) == [("MPIAllreduce", 0.0, 3.0, (0, 1)), ("Relu", 0.0, 1.0, (0,)),
                             ("Relu", 1.0, 2.0, (0,)), ("Relu", 0.0, 1.0, (1,)),
                             ("Add", 3.0, 4.0, (0,)), ("Add", 3.0, 4.0, (1,))]
    assert sim.latency_s == 4.0
    assert sim.comm_s == {0: 3.0, 1: 3.0} and sim.compute_s == {0: 3.0, 1: 2.0}


def test_allreduce_starts_after_what_was_issued_before_it() -> None:
    sim = sim_text(f"""
func @main(%x: {T.format(0)}, %y: {T.format(1)}) {{
  %a = Relu(%x)
  %b = Relu(%a)
  %s0, %s1 = MPIAllreduce(%a, %y)
  %c = Relu(%b)
  %d = Add(%c, %s0)
  return %d, %s1
}}""")
    # Device 0 issued two Relus first: the allreduce starts at 2, ends at 5.
    assert timeline(sim) == [("Relu", 0.0, 1.0, (0,)), ("Relu", 1.0, 2.0, (0,)),
                             ("MPIAllreduce", 2.0, 5.0, (0, 1)), ("Relu", 2.0, 3.0, (0,)),
                             ("Add", 5.0, 6.0, (0,))]
    # An unread result still ends the step when its collective does.
    assert sim.latency_s == 6.0


def test_allreduces_queue_on_the_communication_stream() -> None:
    sim = sim_text(f"""
func @main(%x: {T.format(0)}, %y: {T.format(1)}) {{
  %s0, %s1 = MPIAllreduce(%x, %y)
  %t0, %t1 = MPIAllreduce(%x, %y)
  %a = Relu(%x)
  %b = Add(%a, %t0)
  return %b, %s0, %s1, %t1
}}""")
    assert timeline(sim)[:3] == [("MPIAllreduce", 0.0, 3.0, (0, 1)),
                                 ("MPIAllreduce", 3.0, 6.0, (0, 1)), ("Relu", 0.0, 1.0, (0,))]
    assert sim.latency_s == 7.0


def test_send_stays_synchronous() -> None:
    sim = sim_text(f"""
func @main(%x: {T.format(0)}, %y: {T.format(1)}) {{
  %s0, %s1 = MPIAllreduce(%x, %y)
  %z = Send(%x, device=1)
  %a = Add(%z, %s1)
  return %a, %s0
}}""")
    # The Send occupies both devices' compute at once (0-2), beside the allreduce.
    assert timeline(sim) == [("MPIAllreduce", 0.0, 3.0, (0, 1)), ("Send", 0.0, 2.0, (0, 1)),
                             ("Add", 3.0, 4.0, (1,))]


def test_overlap_slowdown_charges_the_compute_beside() -> None:
    hw = dataclasses.replace(UNIT, overlap_slowdown=0.5)
    sim = sim_text(OVERLAP, hw)
    # Each device's compute loses 1.5 s (0.5 x 3 s): device 0's Relus end at 3.5, its
    # Add runs 3.5-4.5; device 1's Relu ends at 2.5, its Add waits for the allreduce (3).
    assert timeline(sim) == [("MPIAllreduce", 0.0, 3.0, (0, 1)), ("Relu", 1.5, 2.5, (0,)),
                             ("Relu", 2.5, 3.5, (0,)), ("Relu", 1.5, 2.5, (1,)),
                             ("Add", 3.5, 4.5, (0,)), ("Add", 3.0, 4.0, (1,))]
    assert sim.latency_s == 4.5
    # With nothing beside it, the slowdown is hidden by the wait.
    lone = f"""
func @main(%x: {T.format(0)}, %y: {T.format(1)}) {{
  %s0, %s1 = MPIAllreduce(%x, %y)
  %a = Relu(%s0)
  return %a, %s1
}}"""
    assert sim_text(lone, hw).latency_s == sim_text(lone).latency_s == 4.0


CALLS = f"""
func @reduce(%x, %y) {{
  %s0, %s1 = MPIAllreduce(%x, %y)
  %a = Relu(%x)
  return %s0, %s1, %a
}}

func @use(%s, %b) {{
  %c = Relu(%b)
  %d = Add(%c, %s)
  return %d
}}

func @main(%x: {T.format(0)}, %y: {T.format(1)}) {{
  %s0, %s1, %a = call @reduce(%x, %y)
  %b = Relu(%a)
  %d0 = call @use(%s0, %b)
  %e = Relu(%y)
  %d1 = call @use(%s1, %e)
  %f0, %f1, %g = call @reduce(%d0, %d1)
  %h = Relu(%g)
  return %f0, %f1, %h
}}"""


def test_pending_values_cross_calls_both_ways_as_inlined() -> None:
    """A callee's pending result stays pending in the caller, and a pending argument is
    waited for at its first use inside the callee: exactly the inlined program's times."""
    m = distir.parse(CALLS)
    a, b = simulate(m, UNIT), simulate(inline_calls(m.entry), UNIT)
    assert a.latency_s == b.latency_s
    ea, eb = a.events(), b.events()
    assert [(e[3].op_type, e[0], e[2]) for e in ea] == [(e[3].op_type, e[0], e[2]) for e in eb]
    # @use's Relu(b) on device 0 starts at 2, before the allreduce ends (3): the call did
    # not wait for its pending argument on entry.
    relus = [e for e in ea if e[3].op_type == "Relu" and e[5] == "use" and e[2] == (0,)]
    assert relus[0][0] == 2.0


def test_trace_puts_allreduces_on_a_communication_track(tmp_path: Path) -> None:
    sim = sim_text(OVERLAP)
    path = tmp_path / "t.json"
    sim.write_trace(str(path))
    evs = json.loads(path.read_text())["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in evs if e.get("name") == "thread_name"}
    assert names == {0: "device 0", 1: "device 1", 100_000: "device 0 comm",
                     100_001: "device 1 comm"}
    ar = [e for e in evs if e.get("name") == "MPIAllreduce"]
    assert {e["tid"] for e in ar} == {100_000, 100_001}
    for tid in names:  # no two events of one track overlap
        track = sorted((e["ts"], e["ts"] + e["dur"]) for e in evs
                       if e["ph"] == "X" and e["tid"] == tid)
        assert all(x[1] <= y[0] + 1e-9 for x, y in zip(track, track[1:]))


def test_async_ops_are_the_backends_asynchronous_lowerings() -> None:
    import torch  # noqa: F401 - the test needs it

    from distir.analysis.replicas import PEER_OPS, REPLICA_OPS
    from distir.backend.lowering import LOWERINGS, load_lowerings

    load_lowerings()
    # (A replica program's collectives over the copies are for simulation: nothing runs
    # them.)
    folded = REPLICA_OPS | PEER_OPS
    assert {n for n, e in LOWERINGS.rules.items() if e.asynchronous} == ASYNC_OPS - folded
    assert not folded & set(LOWERINGS.rules)


# -- the collective's own slowdown beside bandwidth-bound compute (overlap_comm_slowdown) --

def test_bandwidth_bound_compute_stretches_the_collective_beside_it() -> None:
    hw = dataclasses.replace(UNIT, overlap_comm_slowdown=0.5)
    sim = sim_text(OVERLAP, hw)
    # (UNIT's infinite rates make every kernel bandwidth-bound.) Device 0's Relus run 0-2
    # beside the allreduce (0-3): 2 s, so it ends 0.5 x 2 s later, at 4; device 1's Relu
    # (0-1) stretches its own part by 0.5 s, within that: the slowest device sets the end.
    assert timeline(sim) == [("MPIAllreduce", 0.0, 4.0, (0, 1)), ("Relu", 0.0, 1.0, (0,)),
                             ("Relu", 1.0, 2.0, (0,)), ("Relu", 0.0, 1.0, (1,)),
                             ("Add", 4.0, 5.0, (0,)), ("Add", 4.0, 5.0, (1,))]
    assert sim.latency_s == 5.0
    # Only what runs beside it counts: a Relu after the allreduce ended adds nothing.
    after = f"""
func @main(%x: {T.format(0)}, %y: {T.format(1)}) {{
  %s0, %s1 = MPIAllreduce(%x, %y)
  %a = Relu(%s0)
  %b = Relu(%a)
  return %b, %s1
}}"""
    assert sim_text(after, hw).latency_s == sim_text(after).latency_s == 5.0


def test_comm_slowdown_counts_what_the_compute_slowdown_leaves_beside() -> None:
    # With both: the Relus start 1.5 s late (overlap_slowdown 0.5 x 3 s). Device 0's
    # first runs 1.5-2.5, beside the allreduce (0-3), which then ends at 3.5; its second
    # runs 2.5-3.5, beside it as stretched, so it ends at 4.
    hw = dataclasses.replace(UNIT, overlap_slowdown=0.5, overlap_comm_slowdown=0.5)
    sim = sim_text(OVERLAP, hw)
    assert timeline(sim)[:3] == [("MPIAllreduce", 0.0, 4.0, (0, 1)),
                                 ("Relu", 1.5, 2.5, (0,)), ("Relu", 2.5, 3.5, (0,))]
    assert sim.latency_s == 5.0  # device 0's Add waits for it
    # Two Relus more on device 0: the third (3.5-4.5) is half beside it (0.25 s more),
    # the fourth (4.5-5.5) after it.
    late = OVERLAP.replace("%b = Relu(%a)", "%a2 = Relu(%a)\n  %a3 = Relu(%a2)\n"
                           "  %b = Relu(%a3)")
    assert timeline(sim_text(late, hw))[0] == ("MPIAllreduce", 0.0, 4.25, (0, 1))


def test_comm_slowdown_delays_the_collectives_queued_behind() -> None:
    hw = dataclasses.replace(UNIT, overlap_comm_slowdown=0.5)
    sim = sim_text(f"""
func @main(%x: {T.format(0)}, %y: {T.format(1)}) {{
  %s0, %s1 = MPIAllreduce(%x, %y)
  %t0, %t1 = MPIAllreduce(%x, %y)
  %a = Relu(%x)
  %b = Add(%a, %t0)
  return %b, %s0, %s1, %t1
}}""", hw)
    # The Relu (0-1) beside the first allreduce delays both by 0.5 s: the second starts
    # when the first ends.
    assert timeline(sim)[:3] == [("MPIAllreduce", 0.0, 3.5, (0, 1)),
                                 ("MPIAllreduce", 3.5, 6.5, (0, 1)), ("Relu", 0.0, 1.0, (0,))]
    assert sim.latency_s == 7.5


def test_compute_bound_kernels_leave_the_collective_alone() -> None:
    from distir.analysis.hardware import Hardware, LinkSpec

    # Rates whose ridge (0.25 FLOP/byte) puts a 4 x 4 product (0.67 FLOP/byte) above it
    # and a Relu (0.125) below; every kernel costs about its 1-s launch.
    hw = Hardware(name="ridge", memory_bytes=1 << 40, peak_flops=(("Float32", 2.5e14),),
                  memory_bandwidth=1e15, launch_overhead=1.0, devices_per_node=1 << 20,
                  intra_node=(LinkSpec(2, 1e300, 1.0),), inter_node=(),
                  overlap_comm_slowdown=0.5)
    assert not hw.bandwidth_bound(128.0, 192.0, "Float32")
    assert hw.bandwidth_bound(16.0, 128.0, "Float32")
    prog = f"""
func @main(%x: {T.format(0)}, %y: {T.format(1)}) {{
  %s0, %s1 = MPIAllreduce(%x, %y)
  %a = KERNEL(%x, %x)
  %d = Add(%a, %s0)
  return %d, %s1
}}"""
    plain = dataclasses.replace(hw, overlap_comm_slowdown=0.0, _peak={}, _fits={}, _host={})
    mm = prog.replace("KERNEL", "MatMul")
    assert sim_text(mm, hw).latency_s == sim_text(mm, plain).latency_s
    add = prog.replace("KERNEL", "Add")  # bandwidth-bound: 1 s beside, 0.5 s later
    assert sim_text(add, hw).latency_s == pytest.approx(sim_text(add, plain).latency_s + 0.5)


def test_comm_slowdown_across_calls_as_inlined() -> None:
    hw = dataclasses.replace(UNIT, overlap_slowdown=0.25, overlap_comm_slowdown=0.5)
    m = distir.parse(CALLS)
    a, b = simulate(m, hw), simulate(inline_calls(m.entry), hw)
    assert a.latency_s == b.latency_s > simulate(m, UNIT).latency_s
    assert [(e[3].op_type, e[0], e[1]) for e in a.events()] == \
        [(e[3].op_type, e[0], e[1]) for e in b.events()]


def test_overlap_comm_slowdown_in_profiles() -> None:
    from distir.analysis.hardware import Hardware
    from distir.errors import ConfigError

    hw = dataclasses.replace(UNIT, overlap_comm_slowdown=0.3)
    data = hw.to_json()
    assert data["interconnect"]["overlap_comm_slowdown"] == 0.3
    assert Hardware.from_json(data).overlap_comm_slowdown == 0.3
    assert "overlap_comm_slowdown" not in UNIT.to_json()["interconnect"]  # 0: absent
    data["interconnect"]["overlap_comm_slowdown"] = -1
    with pytest.raises(ConfigError, match="overlap_comm_slowdown must be >= 0"):
        Hardware.from_json(data)


@pytest.mark.parametrize("cfg", [(2, 1, 1, 1), (4, 1, 2, 2), (2, 2, 1, 2)])
def test_comm_slowdown_on_one_replica_as_on_every_replica(cfg: tuple) -> None:
    """A data-parallel step simulated as one replica (``dtp_replica``) or written out
    (``dtp``) gives the same times with the collectives' stretch as without."""
    from distir.transforms import analyze, dtp, dtp_replica
    from tests.analysis.test_simulator_calls import HW
    from tests.analysis.test_simulator_replicas import _mlp, assert_same_as_every_replica

    an = analyze(_mlp())
    hw = dataclasses.replace(HW, overlap_slowdown=0.3, overlap_comm_slowdown=0.5)
    one, full = simulate(dtp_replica(an, *cfg), hw), simulate(dtp(an, *cfg), hw)
    assert_same_as_every_replica(one, full)
    plain = simulate(dtp(an, *cfg), dataclasses.replace(hw, overlap_comm_slowdown=0.0))
    # (with T2 the stretched all-reduces may end before the compute does)
    assert full.latency_s > plain.latency_s if cfg[1] == 1 else \
        full.latency_s >= plain.latency_s
