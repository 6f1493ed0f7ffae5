"""Memoized calls give the results of the inlined program: timelines, busy time, memory.

A call is simulated once per argument key with symbolic entry clocks (max-plus delays);
these tests compare against the same program with every call replaced by the callee's
ops, on hand-written and on random programs whose callees span several devices, nest,
and are entered with different clocks on their devices.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

import distir
from distir.analysis.hardware import Hardware, LinkSpec
from distir.analysis.simulator import Simulation, simulate
from distir.ir import DType, FunctionBuilder, TensorType
from distir.ir.core import Function, Value
from distir.ir.inline import inline_calls
from tests.analysis import random_ops as ops

ROOT = Path(__file__).resolve().parents[2]

# Distinct, non-round costs so that coincidences cannot hide a wrong start time.
HW = Hardware(name="odd", memory_bytes=1 << 40,
              peak_flops=(("Float32", 3.7e9),), memory_bandwidth=1.3e9,
              launch_overhead=0.7, devices_per_node=1 << 20,
              intra_node=(LinkSpec(2, 2.9e8, 0.45),), inter_node=())


def assert_same(a: Simulation, b: Simulation) -> None:
    approx = pytest.approx
    assert a.latency_s == approx(b.latency_s, rel=1e-12)
    assert a.devices == b.devices
    for d in a.devices:
        assert a.compute_s[d] == approx(b.compute_s[d], rel=1e-12, abs=1e-12)
        assert a.comm_s[d] == approx(b.comm_s[d], rel=1e-12, abs=1e-12)
        assert a.idle_s[d] == approx(b.idle_s[d], rel=1e-9, abs=1e-9)
    assert a.peak_memory_bytes == b.peak_memory_bytes
    assert a.num_ops == b.num_ops
    ea, eb = a.events(), b.events()
    assert [(e[3].op_type, e[2]) for e in ea] == [(e[3].op_type, e[2]) for e in eb]
    assert [e[0] for e in ea] == approx([e[0] for e in eb], rel=1e-12, abs=1e-12)


def test_pipeline_example_memoized_equals_inlined() -> None:
    fn = distir.load(str(ROOT / "examples" / "mlp_step_pp2.dir")).entry
    assert_same(simulate(fn, HW), simulate(inline_calls(fn), HW))


def test_data_parallel_example_memoized_equals_inlined() -> None:
    fn = distir.load(str(ROOT / "examples" / "mlp_step_dp2.dir")).entry
    assert_same(simulate(fn, HW), simulate(inline_calls(fn), HW))


def test_two_device_callee_entered_with_different_clocks() -> None:
    """@xfer's ops on device 1 may start before device 0 is free: the summary must keep
    per-device delays, not shift the whole callee by the latest entry clock."""
    text = """
func @xfer(%a, %b) {
  %c = Relu(%b)
  %d = Relu(%c)
  %e = Send(%a, device=1)
  %f = Add(%e, %d)
  %g = Relu(%a)
  return %f, %g
}

func @main(%x: Tensor[Float32, (64, 64), 0], %y: Tensor[Float32, (64, 64), 1]) {
  %x1 = Exp(%x)
  %x2 = Exp(%x1)
  %x3 = Exp(%x2)
  %f1, %g1 = call @xfer(%x3, %y)
  %y2 = Tanh(%f1)
  %y3 = Tanh(%y2)
  %y4 = Tanh(%y3)
  %y5 = Tanh(%y4)
  %f2, %g2 = call @xfer(%g1, %y5)
  %f3, %g3 = call @xfer(%g2, %f2)
  return %f3, %g3
}"""
    fn = distir.parse(text).entry
    a, b = simulate(fn, HW), simulate(inline_calls(fn), HW)
    assert_same(a, b)
    # The callee ran once per distinct argument types, then was replayed.
    assert a.num_ops == 3 + 4 + 3 * 5


Callee = tuple[Function, tuple[int, ...], tuple[int, ...]]  # function, arg and result devices


def _random_program(seed: int) -> Function:
    """A random program on 3 devices: elementwise ops, Sends, allreduces and calls of
    generic callees (themselves with Sends, collectives and nested calls). Arguments of a
    call are distinct values and callees return fresh values (see memory.py: passing one
    value twice is where memoized and inlined memory may differ)."""
    rng = random.Random(seed)
    shape = (rng.choice([8, 16, 32]), rng.choice([8, 64]))
    devices = [0, 1, 2]

    def body(b: FunctionBuilder, pool: list[tuple[Value, int]], n_ops: int,
             callees: list[Callee]) -> list[tuple[Value, int]]:
        for _ in range(n_ops):
            r = rng.random()
            v, d = rng.choice(pool)
            if r < 0.4:
                ops.unary(b, rng, pool, v, d)
            elif r < 0.55:
                ops.binary(b, rng, pool, v, d)
            elif r < 0.7:
                ops.send(b, rng, pool, v, d, devices)
            elif r < 0.8:
                ops.allreduce(b, rng, pool)
            elif callees:
                f, sig, res_devs = rng.choice(callees)
                args: list[Value] = []
                for sd in sig:
                    cands = [p for p, pd in pool if pd == sd and p not in args]
                    if not cands:
                        break
                    args.append(rng.choice(cands))
                else:
                    res = b.call(f, *args)
                    pool.extend(zip(res if isinstance(res, tuple) else (res,), res_devs))
        return pool

    def callee(name: str, sig: tuple[int, ...], inner: list[Callee], n_ops: int) -> Callee:
        b = FunctionBuilder(name)
        pool = [(b.param(f"p{i}"), d) for i, d in enumerate(sig)]
        pool = body(b, pool, n_ops, inner)
        fresh = pool[len(sig):] or [(b.op("Relu", pool[0][0]), sig[0])]
        outs = rng.sample(fresh, min(len(fresh), rng.randint(1, 3)))
        return b.ret(*(v for v, _ in outs)), sig, tuple(d for _, d in outs)

    leaf = callee("leaf", (rng.choice(devices),), [], rng.randint(2, 6))
    mid = callee("mid", tuple(rng.sample(devices, 2)), [leaf], rng.randint(4, 10))
    b = FunctionBuilder("main")
    pool = [(b.param(f"x{d}", TensorType(DType.Float32, shape, d)), d) for d in devices]
    pool = body(b, pool, 60, [leaf, mid])
    return b.ret(*(v for v, _ in pool[-4:]))


@pytest.mark.parametrize("seed", range(40))
def test_random_programs_memoized_equals_inlined(seed: int) -> None:
    fn = _random_program(seed)
    # Every other seed with collectives stretched by the bandwidth-bound compute beside
    # them (a replay of the summaries' events, calls expanded).
    hw = HW if seed % 2 else dataclasses.replace(HW, overlap_slowdown=0.2,
                                                 overlap_comm_slowdown=0.4)
    assert_same(simulate(fn, hw), simulate(inline_calls(fn), hw))


@pytest.mark.parametrize("cfg", [(2, 1, 1, 1), (1, 2, 2, 2), (2, 2, 2, 4)])
def test_transformed_mlp_memoized_equals_inlined(cfg: tuple[int, int, int, int]) -> None:
    from distir.models import mlp
    from distir.transforms import dtp

    fn = dtp(mlp(batch_size=16, input_dim=8, hidden_dim=16, output_dim=4, num_layers=4), *cfg)
    assert_same(simulate(fn, HW), simulate(inline_calls(fn), HW))


def test_transformed_gpt2_memoized_equals_inlined() -> None:
    from distir.models import gpt2
    from distir.transforms import dtp

    g = gpt2(n_layer=2, d_model=32, n_head=4, vocab_size=64, seq_len=8, batch_size=4)
    fn = dtp(g, 2, 2, 2, 2)
    assert_same(simulate(fn, HW), simulate(inline_calls(fn), HW))
    hw = dataclasses.replace(HW, overlap_slowdown=0.2, overlap_comm_slowdown=0.4)
    assert_same(simulate(fn, hw), simulate(inline_calls(fn), hw))
