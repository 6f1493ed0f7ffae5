"""``optimize``: the per-op search at scale (segments, a cache per structure), against
``dtp``'s D/T configurations and the reference executor."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

import distir
from distir.analysis import random_inputs
from distir.analysis.simulator import simulate
from distir.errors import ConfigError
from distir.transforms import dtp
from distir.transforms.program import Program
from distir.transforms.spmd import Mesh, lower, optimize
from distir.transforms.spmd.segments import decompose


@cache
def _mlp(layers: int = 4) -> distir.Function:
    return distir.models.mlp(batch_size=64, input_dim=128, hidden_dim=128, output_dim=128,
                             num_layers=layers)


def test_layers_share_one_structure() -> None:
    """A training step is cut per layer (activation forward, gradient back), and the
    middle layers have one signature."""
    dec = decompose(Program(_mlp(6)))
    assert all(len(b) == 2 for b in dec.boundaries)
    sigs = [s.signature for s in dec.segments]
    assert len(set(sigs)) < len(sigs) - 3  # repeated layers share
    ops = sorted(i for s in dec.segments for i in s.ops)
    assert len(ops) == len(set(ops))


@pytest.mark.parametrize("devices", [2, 4])
def test_mlp_at_least_as_fast_as_dtp(devices: int) -> None:
    fn = _mlp()
    r = optimize(fn, devices, "h100-sxm")
    best = min(simulate(dtp(fn, dp=d, tp=devices // d), "h100-sxm").latency_s
               for d in (1, 2, 4) if devices % d == 0)
    assert r.simulation.latency_s <= best * 1.0001
    assert r.candidates[0].fits
    assert r.stats["meshes"][0]["segment_searches"] < 200  # cached across layers


def test_found_plan_equals_sequential() -> None:
    fn = _mlp(3)
    r = optimize(fn, 2, "h100-sxm")
    ins = random_inputs(fn, seed=0)
    want = distir.execute(fn, list(ins))
    got = distir.execute(lower(r.assignment, self_contained=True), list(ins))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_deep_mlp_is_fast() -> None:
    """16 layers cost about one layer's search (search_small needed 240 s for 8)."""
    r = optimize(distir.models.mlp(64, 64, 64, 64, num_layers=16), 2, "h100-sxm")
    assert r.seconds < 20
    assert r.stats["meshes"][0]["structures"] <= 6


def test_public_and_errors() -> None:
    assert distir.optimize is optimize
    with pytest.raises(ConfigError, match="has 2 devices, not 4"):
        optimize(_mlp(), 4, meshes=[Mesh.of(2)])
