"""Profiles of several nodes: ``nodes`` and ``nics_per_node`` in a profile's interconnect,
profiles derived from a base profile, and the shipped multi-node profiles."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import distir
from distir.analysis.hardware import Hardware, collective_factors, load_hardware
from distir.errors import ConfigError

GiB = float(1 << 30)


def _ring(hw: Hardware, kind: str, nbytes: float, n: int, bw: float, lat: float) -> float:
    steps, volume = collective_factors(kind, n)
    return hw.launch_overhead + steps * lat + volume * nbytes / bw


def test_h100_cluster_profiles_keep_h100_sxm_within_a_node() -> None:
    base = load_hardware("h100-sxm")
    for name, nodes in (("h100-sxm-ib", None), ("h100-2x8-ib", 16)):
        hw = load_hardware(name)
        assert hw.num_devices == nodes and hw.devices_per_node == 8 and hw.nics_per_node == 8
        assert hw.peak_flops == base.peak_flops and hw.fits == base.fits
        for devs in ([0, 1], list(range(8)), [8, 9, 10, 11]):
            for kind in ("allreduce", "allgather", "broadcast"):
                assert hw.comm_time(kind, GiB, devs) == base.comm_time(kind, GiB, devs)


def test_a_ring_across_nodes_shares_the_busiest_nodes_adapters() -> None:
    hw = load_hardware("h100-2x8-ib")
    nic, lat = 50e9, 5e-6
    # All 8 GPUs of each node: 8 adapters of 50 GB/s, capped by the node's own link of 8.
    cap = hw.link(8, False).bandwidth
    assert hw.comm_time("allreduce", GiB, range(16)) == pytest.approx(
        _ring(hw, "allreduce", GiB, 16, min(8 * nic, cap), lat))
    # One GPU per node: its own adapter only.
    assert hw.comm_time("allreduce", GiB, [0, 8]) == pytest.approx(
        _ring(hw, "allreduce", GiB, 2, nic, lat))
    # Three of one node, one of the other: the busier node's three adapters.
    assert hw.comm_time("reduce_scatter", GiB, [0, 1, 2, 8]) == pytest.approx(
        _ring(hw, "reduce_scatter", GiB, 4, 3 * nic, lat))
    # Any number of nodes on the cluster profile; more nodes, slower.
    big = load_hardware("h100-sxm-ib").with_nodes(512)
    assert big.num_devices == 4096 and big.nodes == 512
    one_per_node = [8 * i for i in range(512)]
    assert big.comm_time("allreduce", GiB, one_per_node) > hw.comm_time("allreduce", GiB,
                                                                         [0, 8])


def test_t4_cluster_has_one_slow_adapter_per_node() -> None:
    hw = load_hardware("t4-4x4-50gbe")
    assert (hw.nodes, hw.devices_per_node, hw.num_devices, hw.nics_per_node) == (4, 4, 16, 1)
    assert hw.peak("BFloat16") == hw.peak("Float32")  # no bf16 hardware on Turing
    intra = hw.comm_time("allreduce", GiB, range(4))
    assert intra == pytest.approx(_ring(hw, "allreduce", GiB, 4, 16e9, 5e-6))
    # Across nodes: 6.25 GB/s whether one GPU per node or all four take part.
    assert hw.comm_time("allreduce", GiB, [0, 4, 8, 12]) == pytest.approx(
        _ring(hw, "allreduce", GiB, 4, 6.25e9, 25e-6))
    assert hw.comm_time("allreduce", GiB, range(16)) == pytest.approx(
        _ring(hw, "allreduce", GiB, 16, 6.25e9, 25e-6))


def test_single_node_profiles_are_unchanged() -> None:
    for name in ("h100-sxm", "h200-sxm", "dgx2-v100", "h100-sxm-datasheet"):
        hw = load_hardware(name)
        assert hw.nodes == 0 and hw.nics_per_node == 0 and hw.num_devices is None
        # Without nics_per_node a collective spanning nodes keeps the bus-bandwidth rule.
        spec = hw.inter_node[0]
        n = 2 * hw.devices_per_node
        assert hw.comm_time("allreduce", GiB, range(n)) == pytest.approx(
            _ring(hw, "allreduce", GiB, n, spec.bandwidth, spec.latency))
        again = Hardware.from_json(hw.to_json(), "again")
        assert (again.nodes, again.nics_per_node) == (0, 0)


def test_round_trip_and_simulation(tmp_path: Path) -> None:
    hw = load_hardware("t4-4x4-50gbe")
    again = Hardware.from_json(hw.to_json(), "again")
    assert (again.nodes, again.nics_per_node) == (4, 1)
    from distir.models.mlp import mlp
    from distir.transforms import dtp

    step = dtp(mlp(batch_size=32, input_dim=64, hidden_dim=64, output_dim=8, num_layers=2),
               dp=8)
    slow = distir.simulate(step, hardware="t4-4x4-50gbe").latency_s
    fast = distir.simulate(step, hardware="h100-2x8-ib").latency_s
    assert slow > fast > 0


def test_derived_profiles(tmp_path: Path) -> None:
    p = tmp_path / "mine.json"
    p.write_text(json.dumps({"format": "distir-hardware/1", "name": "mine",
                             "base": "t4-4x4-50gbe",
                             "interconnect": {"nodes": 32}}))
    hw = load_hardware(str(p))
    assert hw.name == "mine" and hw.num_devices == 128
    assert hw.peak_flops == load_hardware("t4-4x4-50gbe").peak_flops
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps({"format": "distir-hardware/1", "name": "a", "base": "b.json"}))
    b.write_text(json.dumps({"format": "distir-hardware/1", "name": "b", "base": "a.json"}))
    with pytest.raises(ConfigError, match="lead back to it") as e:
        load_hardware(str(a))
    assert "\n" not in str(e.value)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "distir-hardware/1", "name": "x", "base": "nope"}))
    with pytest.raises(ConfigError, match="unknown hardware profile 'nope'"):
        load_hardware(str(bad))
    neg = tmp_path / "neg.json"
    neg.write_text(json.dumps({"format": "distir-hardware/1", "name": "n",
                               "base": "h100-sxm", "interconnect": {"nics_per_node": -1}}))
    with pytest.raises(ConfigError, match="nics_per_node"):
        load_hardware(str(neg))
    with pytest.raises(ConfigError, match="at least 1 node"):
        hw.with_nodes(0)
