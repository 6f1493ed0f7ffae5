"""Calls equal up to renaming devices share one summary (``distir.analysis.renaming``), and
every figure stays that of the inlined program: timelines, per-device busy time and memory,
and the trace's devices and types.

Random programs call device-free callees (elementwise ops, all-reduces, nested calls) on
random device assignments, on a machine of 2 devices per node whose links across nodes
differ from those within, so a renaming that mixed nodes up would change a cost.
"""

from __future__ import annotations

import random

import pytest

from distir.analysis.hardware import Hardware, LinkSpec
from distir.analysis.simulator import Simulation, Simulator, simulate
from distir.ir import DType, FunctionBuilder, TensorType
from distir.ir.core import Function, Value
from distir.ir.inline import inline_calls
from tests.analysis import random_ops as ops
from tests.analysis.test_simulator_calls import assert_same

HW = Hardware(name="odd-nodes", memory_bytes=1 << 40,
              peak_flops=(("Float32", 3.7e9),), memory_bandwidth=1.3e9,
              launch_overhead=0.7, devices_per_node=2,
              intra_node=(LinkSpec(2, 2.9e8, 0.45),),
              inter_node=(LinkSpec(2, 0.7e8, 1.35),))

DEVICES = list(range(6))

# A callee: the function and, per parameter, its device label (labels are distinct devices).
Callee = tuple[Function, tuple[int, ...], tuple[int, ...]]  # fn, param labels, result labels


def assert_same_trace(a: Simulation, b: Simulation) -> None:
    """``assert_same`` plus each event's input and result types (their devices)."""
    assert_same(a, b)
    assert [(e[2], e[4][1], e[4][2]) for e in a.events()] == \
        [(e[2], e[4][1], e[4][2]) for e in b.events()]


def _random_program(seed: int) -> Function:
    rng = random.Random(seed)
    shape = (rng.choice([8, 16]), rng.choice([8, 64]))

    def body(b: FunctionBuilder, pool: list[tuple[Value, int]], n_ops: int,
             callees: list[Callee], devices: list[int], sends: bool) -> None:
        for _ in range(n_ops):
            r = rng.random()
            v, d = rng.choice(pool)
            if r < 0.35:
                ops.unary(b, rng, pool, v, d)
            elif r < 0.5:
                ops.binary(b, rng, pool, v, d)
            elif r < 0.6 and sends:
                ops.send(b, rng, pool, v, d, devices)
            elif r < 0.72:
                ops.allreduce(b, rng, pool)
            elif callees:
                f, labels, res_labels = rng.choice(callees)
                n = max(labels) + 1
                if n > len(devices):
                    continue
                place = rng.sample(devices, n)  # label -> device, injective
                args: list[Value] = []
                for lab in labels:
                    cands = [p for p, pd in pool if pd == place[lab] and p not in args]
                    if not cands:
                        break
                    args.append(rng.choice(cands))
                else:
                    res = b.call(f, *args)
                    res = res if isinstance(res, tuple) else (res,)
                    pool.extend(zip(res, (place[lab] for lab in res_labels)))

    def callee(name: str, labels: tuple[int, ...], inner: list[Callee], n_ops: int) -> Callee:
        b = FunctionBuilder(name)
        pool = [(b.param(f"p{i}"), lab) for i, lab in enumerate(labels)]
        body(b, pool, n_ops, inner, sorted(set(labels)), sends=False)
        fresh = pool[len(labels):] or [(b.op("Relu", pool[0][0]), labels[0])]
        outs = rng.sample(fresh, min(len(fresh), rng.randint(1, 3)))
        return b.ret(*(v for v, _ in outs)), labels, tuple(lab for _, lab in outs)

    leaf = callee("leaf", (0, 0), [], rng.randint(2, 5))
    pair = callee("pair", (0, 1, 0, 1), [leaf], rng.randint(4, 9))
    trio = callee("trio", (0, 1, 2, 1), [leaf, pair], rng.randint(5, 10))
    b = FunctionBuilder("main")
    pool: list[tuple[Value, int]] = []
    for d in DEVICES:
        for i in range(2):
            pool.append((b.param(f"x{d}_{i}", TensorType(DType.Float32, shape, d)), d))
    body(b, pool, 70, [leaf, pair, trio], DEVICES, sends=True)
    return b.ret(*(v for v, _ in pool[-4:]))


def _renamed(got: Simulation) -> int:
    """The calls of a simulation (nested ones included) given a renamed summary."""
    n = 0
    todo = [got._events]
    while todo:
        for ev in todo.pop():
            if ev[1] is None:  # a call: its summary first
                n += ev[0].rename is not None
                todo.append(ev[0].events)
    return n


@pytest.mark.parametrize("seed", range(30))
def test_random_programs_renamed_equal_inlined(seed: int) -> None:
    fn = _random_program(seed)
    sim = Simulator(HW)
    got = sim.simulate_function(fn)
    assert_same_trace(got, simulate(inline_calls(fn), HW))
    assert_same_trace(got, Simulator(HW, rename_devices=False).simulate_function(fn))


def test_random_programs_do_rename() -> None:
    """The test above is not vacuous: most programs share renamed summaries."""
    renamed = 0
    for seed in range(30):
        sim = Simulator(HW)
        renamed += _renamed(sim.simulate_function(_random_program(seed))) > 0
    assert renamed >= 20


def test_renaming_keeps_nodes_apart() -> None:
    """An all-reduce within a node and one across nodes do not share a summary, and
    calls on equal layouts in other nodes do."""
    b = FunctionBuilder("ar")
    x, y = b.param("x"), b.param("y")
    u, v = b.op("MPIAllreduce", x, y, num_results=2)
    ar = b.ret(b.op("Relu", u), v)
    m = FunctionBuilder("main")
    xs = [m.param(f"x{d}", TensorType(DType.Float32, (64, 64), d)) for d in range(6)]
    outs = []
    for d0, d1 in [(0, 1), (2, 3), (1, 2), (5, 4), (3, 4)]:  # in, in, across, in, across
        outs.extend(m.call(ar, xs[d0], xs[d1]))
    fn = m.ret(*outs)
    sim = Simulator(HW)
    got = sim.simulate_function(fn)
    assert_same_trace(got, simulate(inline_calls(fn), HW))
    canonical = {k[1] for k, s in sim._summaries.items() if s.rename is None}
    assert len(canonical) == 2  # one within a node, one across


def test_callee_naming_a_device_is_not_renamed() -> None:
    b = FunctionBuilder("move")
    x = b.param("x")
    mv = b.ret(b.op("Send", b.op("Relu", x), device=0))
    m = FunctionBuilder("main")
    xs = [m.param(f"x{d}", TensorType(DType.Float32, (8, 8), d)) for d in (2, 4)]
    fn = m.ret(m.call(mv, xs[0]), m.call(mv, xs[1]))
    sim = Simulator(HW)
    got = sim.simulate_function(fn)
    assert_same_trace(got, simulate(inline_calls(fn), HW))
    assert _renamed(got) == 0


@pytest.mark.parametrize("cfg", [(2, 2, 2, 2), (4, 1, 2, 4), (2, 4, 1, 1)])
def test_transformed_programs_renamed_equal_inlined(cfg: tuple[int, int, int, int]) -> None:
    """Replicas' and stages' calls share summaries; on 2 devices per node, D/T/P programs
    span nodes (the builder tower's programs, whose replicas call one function)."""
    from distir.models import gpt2, mlp
    from distir.transforms.tower import dtp

    for seq in (mlp(batch_size=16, input_dim=8, hidden_dim=16, output_dim=4, num_layers=4),
                gpt2(n_layer=4, d_model=32, n_head=4, vocab_size=64, seq_len=8,
                     batch_size=16)):
        fn = dtp(seq, *cfg)
        sim = Simulator(HW)
        got = sim.simulate_function(fn, 16)
        assert_same_trace(got, simulate(inline_calls(fn), HW, 16))
        if cfg[0] > 1:
            assert _renamed(got) > 0
