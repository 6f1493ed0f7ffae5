"""Host dispatch (``Hardware.host_dispatch``): each device's host issues its ops one after
another, and an op starts no earlier than its host has issued it.

Exact semantics on hand-made programs (``UNIT``: every kernel 1 s, a 2-device allreduce
3 s, a ``Send`` 2 s), then the same exactness checks as without hosts: memoized and
renamed calls give the inlined program's timelines, on random and transformed programs.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import distir
from distir.analysis.hardware import Hardware, load_hardware
from distir.analysis.simulator import Simulator, simulate
from distir.errors import ConfigError
from distir.ir.inline import inline_calls
from tests.analysis import test_simulator_calls as calls
from tests.analysis import test_simulator_renaming as renaming
from tests.analysis.test_simulator import UNIT, sim_text, timeline
from tests.analysis.test_simulator_calls import assert_same


def with_host(hw: Hardware, **table: float) -> Hardware:
    """``hw`` whose hosts take ``table[op type]`` seconds per op (``star`` for the rest)."""
    items = tuple(("*" if k == "star" else k, v) for k, v in table.items())
    return dataclasses.replace(hw, name=f"{hw.name}+host", host_dispatch=items, _host={})


T = "Tensor[Float32, (4, 4), {}]"


def test_a_host_bound_chain_runs_at_the_hosts_pace() -> None:
    text = f"""
func @main(%x: {T.format(0)}) {{
  %a = Relu(%x)
  %b = Relu(%a)
  %c = Relu(%b)
  return %c
}}"""
    hw = with_host(UNIT, Relu=2.5)
    sim = sim_text(text, hw)
    # Each Relu (1 s) waits for its host (2.5 s per op): 2.5-3.5, 5-6, 7.5-8.5.
    assert timeline(sim) == [("Relu", 2.5, 3.5, (0,)), ("Relu", 5.0, 6.0, (0,)),
                             ("Relu", 7.5, 8.5, (0,))]
    assert sim.latency_s == 8.5
    assert sim.busy_s[0] == 3.0  # busy counts the device's kernels only
    assert sim.host_s == {0: 7.5} and sim.to_dict()["host_s"] == {"0": 7.5}
    assert sim_text(text).host_s == {}  # not modelled: not reported


def test_a_cuda_graph_profile_drops_the_hosts() -> None:
    text = f"""
func @main(%x: {T.format(0)}) {{
  %a = Relu(%x)
  %b = Relu(%a)
  return %b
}}"""
    hw = with_host(UNIT, Relu=2.5)
    graph = hw.for_cuda_graphs()
    assert not graph.models_host and graph.name == f"{hw.name}+graph"
    assert graph.for_cuda_graphs() is graph and UNIT.for_cuda_graphs() is UNIT
    # Everything but the host is the profile's: the kernels run back to back.
    assert sim_text(text, graph).latency_s == sim_text(text, UNIT).latency_s == 2.0
    assert sim_text(text, hw).latency_s == 6.0


def test_the_host_runs_ahead_of_long_kernels() -> None:
    """A long kernel hides the host's issue of the next ones: they queue and run back to
    back, and the step ends when the device does."""
    text = f"""
func @main(%x: {T.format(0)}, %w: Tensor[Float32, (4, 4096), 0]) {{
  %a = MatMul(%x, %w)
  %b = Relu(%x)
  %c = Relu(%b)
  return %a, %c
}}"""
    hw = with_host(UNIT, star=0.25)
    sim = sim_text(text, hw)
    assert timeline(sim) == [("MatMul", 0.25, 1.25, (0,)), ("Relu", 1.25, 2.25, (0,)),
                             ("Relu", 2.25, 3.25, (0,))]
    # A profile without host dispatch: the same program from 0.
    assert sim_text(text).latency_s == 3.0


def test_the_step_ends_when_the_host_does() -> None:
    """Ops without kernels (views) still take their host's time."""
    text = f"""
func @main(%x: {T.format(0)}) {{
  %a = Relu(%x)
  %b = Identity(%a)
  %c = Flatten(%b, axis=0)
  return %c
}}"""
    sim = sim_text(text, with_host(UNIT, Relu=0.5, star=3.0))
    assert sim.latency_s == 6.5  # host 0.5 + 3 + 3; the Relu ran 0.5-1.5


def test_collectives_start_when_every_host_has_issued_them() -> None:
    text = f"""
func @main(%x: {T.format(0)}, %y: {T.format(1)}) {{
  %a = Relu(%x)
  %s0, %s1 = MPIAllreduce(%a, %y)
  %t = Send(%s0, device=1)
  %u = Add(%t, %s1)
  return %u
}}"""
    hw = with_host(UNIT, Relu=0.5, MPIAllreduce=2.0, Send=0.25, Add=0.5)
    sim = sim_text(text, hw)
    # Device 0's host: Relu until 0.5, the allreduce until 2.5; device 1's host issues
    # the allreduce by 2.0, so it runs 2.5-5.5 on the streams. The Send (hosts at 2.75
    # and 2.25) waits for the allreduce's result on device 0: 5.5-7.5; the Add 7.5-8.5.
    assert timeline(sim) == [("Relu", 0.5, 1.5, (0,)), ("MPIAllreduce", 2.5, 5.5, (0, 1)),
                             ("Send", 5.5, 7.5, (0, 1)), ("Add", 7.5, 8.5, (1,))]


def test_host_dispatch_in_profiles_round_trips_and_is_checked(tmp_path: Path) -> None:
    hw = with_host(load_hardware("h100-sxm"), star=1.5e-5, MatMul=2.2e-5)
    assert hw.models_host and hw.host_seconds("MatMul") == 2.2e-5
    assert hw.host_seconds("Relu") == 1.5e-5
    back = Hardware.from_json(hw.to_json())
    assert back.host_dispatch == hw.host_dispatch and back.host_seconds("MatMul") == 2.2e-5
    assert not load_hardware("h100-sxm").models_host
    assert back.with_nodes(2).host_seconds("Relu") == 1.5e-5
    # A derived profile adds host dispatch to its base.
    p = tmp_path / "host.json"
    p.write_text(json.dumps({"format": "distir-hardware/1", "base": "h100-sxm",
                             "name": "h100-host",
                             "device": {"host_dispatch": {"*": 1e-5, "Add": 2e-5}}}))
    d = load_hardware(str(p))
    assert d.host_seconds("Add") == 2e-5 and d.host_seconds("Gemm") == 1e-5
    bad = hw.to_json()
    bad["device"]["host_dispatch"] = {"*": -1.0}
    with pytest.raises(ConfigError, match="host_dispatch"):
        Hardware.from_json(bad)


# -- exactness: memoized and renamed calls as the inlined program --------------------------

CALLS_HW = with_host(calls.HW, star=0.9, Relu=0.31, Exp=1.7, Add=0.55, Send=0.4,
                     MPIAllreduce=1.1, Tanh=0.05)
RENAMING_HW = with_host(renaming.HW, star=0.9, Relu=0.31, Exp=1.7, Add=0.55, Send=0.4,
                        MPIAllreduce=1.1, Neg=2.3)


@pytest.mark.parametrize("seed", range(40))
def test_random_programs_memoized_equal_inlined_with_hosts(seed: int) -> None:
    fn = calls._random_program(seed)
    a, b = simulate(fn, CALLS_HW), simulate(inline_calls(fn), CALLS_HW)
    assert_same(a, b)
    assert a.host_s == pytest.approx(b.host_s, rel=1e-12)


@pytest.mark.parametrize("seed", range(30))
def test_random_programs_renamed_equal_inlined_with_hosts(seed: int) -> None:
    fn = renaming._random_program(seed)
    got = Simulator(RENAMING_HW).simulate_function(fn)
    flat = simulate(inline_calls(fn), RENAMING_HW)
    renaming.assert_same_trace(got, flat)
    assert got.host_s == pytest.approx(flat.host_s, rel=1e-12)
    renaming.assert_same_trace(
        got, Simulator(RENAMING_HW, rename_devices=False).simulate_function(fn))


def test_hosts_change_the_random_programs() -> None:
    """The tests above are not vacuous: the hosts set the pace of most programs."""
    slower = sum(simulate(calls._random_program(s), CALLS_HW).latency_s >
                 simulate(calls._random_program(s), calls.HW).latency_s for s in range(40))
    assert slower >= 30


@pytest.mark.parametrize("cfg", [(2, 1, 1, 1), (1, 2, 2, 2), (2, 2, 2, 4)])
def test_transformed_programs_with_hosts_equal_inlined(cfg: tuple[int, ...]) -> None:
    from distir.models import gpt2, mlp
    from distir.transforms import dtp

    for seq in (mlp(batch_size=16, input_dim=8, hidden_dim=16, output_dim=4, num_layers=4),
                gpt2(n_layer=2, d_model=32, n_head=4, vocab_size=64, seq_len=8,
                     batch_size=16)):
        fn = dtp(seq, *cfg)
        got = Simulator(RENAMING_HW, share_equal_functions=True).simulate_function(fn, 16)
        renaming.assert_same_trace(got, simulate(inline_calls(fn), RENAMING_HW, 16))


def test_overlapped_allreduces_with_hosts_as_inlined() -> None:
    from tests.analysis.test_simulator_overlap import CALLS as OVERLAP_CALLS

    hw = with_host(dataclasses.replace(UNIT, overlap_slowdown=0.5), star=0.7,
                   MPIAllreduce=1.3)
    m = distir.parse(OVERLAP_CALLS)
    assert_same(simulate(m, hw), simulate(inline_calls(m.entry), hw))
