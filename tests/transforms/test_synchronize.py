"""``synchronize``: every strategy's program gives the unsynchronised program's updated
weights under the reference executor (exactly up to float summation order; within 16-bit
precision with compression), simulates, and runs on gloo for a sample."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import distir
from distir.analysis import execute, random_inputs
from distir.backend import Session
from distir.errors import TransformError
from distir.ir import Function, dumps, parse
from distir.models.mlp import mlp
from distir.transforms import dtp, synchronize, training_step
from distir.transforms.synchronize import (
    DDP_FIRST_BUCKET_BYTES,
    VarSync,
    dumps_strategy,
    gradients,
    resolve,
    with_updates_inlined,
)

BUILDERS: list[dict[str, Any]] = [
    {"builder": "per-gradient"}, {"builder": "ddp"}, {"builder": "ddp", "bucket_bytes": 600},
    {"builder": "merge-all"}, {"builder": "chunk", "k": 2}, {"builder": "ps"},
    {"builder": "ps", "device": 1}, {"builder": "ps-lb"}, {"builder": "zero-1"},
    {"builder": "zero-2"}, {"bucket_bytes": 300},
]
COMPRESSED: list[dict[str, Any]] = [
    {"builder": "merge-all", "compress": "fp16"}, {"builder": "ps", "compress": "bf16"},
    {"builder": "zero-2", "compress": "fp16"}, {"builder": "chunk", "k": 3, "compress": "bf16"},
]

FORWARD = """func @main(%x: Tensor[Float32, (8, 6), 0], %w0: Tensor[Float32, (6, 4), 0],
           %b0: Tensor[Float32, (4,), 0], %w1: Tensor[Float32, (4, 2), 0]) {
  %h = MatMul(%x, %w0)
  %hb = Add(%h, %b0)
  %a = Relu(%hb)
  %y = MatMul(%a, %w1)
  return %y
}
"""


def _mlp_dp(dp: int, layers: int = 4) -> Function:
    return dtp(mlp(batch_size=4 * dp, input_dim=8, hidden_dim=8, output_dim=4,
                   num_layers=layers), dp=dp)


def _adam_dp(dp: int) -> Function:
    step = training_step(parse(FORWARD).entry, optimizer="adam", wrt=["w0", "b0", "w1"])
    return dtp(step, dp=dp)


def _replicated_inputs(fn: Function, seed: int = 0) -> list[np.ndarray]:
    """Random inputs in which every replica holds the same weights and optimizer state
    (what data parallelism keeps), each replica its own batch; Adam's second moment and
    step positive. Found by structure, not by the parameters' names (``dtp``'s tower
    names a placed weight ``w0_dp0_tp0``, the passes ``w0_d0``): for each gradient, the
    parameters its replicas' optimizer ops read at one input other than the gradient are
    made equal."""
    ins = random_inputs(fn, seed=seed)
    at = {p: i for i, p in enumerate(fn.params)}
    grads = gradients(fn)
    positive = {at[u.inputs[i]] for u in with_updates_inlined(fn).ops  # type: ignore[index]
                if u.op_type == "AdamOptimizer" for i in (3, 4) if u.inputs[i] in at}
    for j in positive:
        ins[j] = np.abs(ins[j]) + 1
    for gr in grads:
        for i, x0 in enumerate(gr.updates[0].inputs):
            if i != 1 and x0 in at:
                for u in gr.updates[1:]:
                    ins[at[u.inputs[i]]] = ins[at[x0]]  # type: ignore[index]
    return ins


def _close(got: list[np.ndarray], want: list[np.ndarray], tol: float) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


@pytest.fixture(scope="module")
def mlp4() -> tuple[Function, list[np.ndarray], list[np.ndarray]]:
    fn = _mlp_dp(4)
    ins = _replicated_inputs(fn, seed=2)
    return fn, ins, execute(fn, ins)


@pytest.mark.parametrize("strategy", BUILDERS, ids=lambda s: str(sorted(s.items())))
def test_every_builder_gives_the_reference_update(
        mlp4: tuple[Function, list[np.ndarray], list[np.ndarray]],
        strategy: dict[str, Any]) -> None:
    fn, ins, want = mlp4
    out = synchronize(fn, strategy)
    _close(execute(out, ins), want, 1e-5)
    sim = distir.simulate(out, hardware="h200-sxm")
    assert sim.latency_s > 0


@pytest.mark.parametrize("strategy", COMPRESSED, ids=lambda s: str(sorted(s.items())))
def test_compression_is_within_16_bit_precision(
        mlp4: tuple[Function, list[np.ndarray], list[np.ndarray]],
        strategy: dict[str, Any]) -> None:
    fn, ins, want = mlp4
    out = synchronize(fn, strategy)
    got = execute(out, ins)
    # The update is lr * gradient: its 16-bit rounding is lr * |g| * 2^-8 at most (bf16).
    for g, w, w0 in zip(got, want, ins[:len(got)]):
        step = np.abs(w - w0).max()
        np.testing.assert_allclose(g, w, atol=step * 2.0 ** -7 + 1e-7, rtol=0)
    assert any(op.op_type == "Cast" for op in out.ops)


@pytest.mark.parametrize("strategy", [
    {"builder": "merge-all"}, {"builder": "ps", "device": 1}, {"builder": "zero-1"},
    {"builder": "zero-2"}, {"builder": "chunk", "k": 2, "compress": "fp16"},
    {"variables": [{"sync": "zero"}, {"sync": "allreduce", "group": 5},
                   {"sync": "ps", "device": 0}]},
], ids=str)
def test_adam_and_a_reshaped_bias_gradient(strategy: dict[str, Any]) -> None:
    fn = _adam_dp(2)
    grads = gradients(fn)
    # The bias gradient is a Reshape of a ReduceSum: still a gradient, whether the Reshape
    # comes after its all-reduce (dtp's tower: a view, Gradient.views) or before it (the
    # passes issue it early).
    assert sorted(g.type.shape for g in grads) == [(4,), (4, 2), (6, 4)]
    ins = _replicated_inputs(fn, seed=4)
    want = execute(fn, ins)
    got = execute(synchronize(fn, strategy), ins)
    tol = 1e-2 if "compress" in strategy else 1e-5
    _close(got, want, tol)


VIEWED = """func @main(%b0: Tensor[Float32, (4,), 0], %b1: Tensor[Float32, (4,), 1],
           %g0: Tensor[Float32, (1, 4), 0], %g1: Tensor[Float32, (1, 4), 1],
           %m0: Tensor[Float32, (4,), 0], %m1: Tensor[Float32, (4,), 1],
           %v0: Tensor[Float32, (4,), 0], %v1: Tensor[Float32, (4,), 1],
           %s0: Tensor[Float32, (), 0], %s1: Tensor[Float32, (), 1],
           %w0: Tensor[Float32, (4, 2), 0], %w1: Tensor[Float32, (4, 2), 1],
           %h0: Tensor[Float32, (4, 2), 0], %h1: Tensor[Float32, (4, 2), 1]) {
  %shape0 = Constant(value=dense<Int64>[4], device=0)
  %shape1 = Constant(value=dense<Int64>[4], device=1)
  %t0, %t1 = MPIAllreduce(%h0, %h1)
  %r0, %r1 = MPIAllreduce(%g0, %g1)
  %q0 = Reshape(%r0, %shape0)
  %q1 = Reshape(%r1, %shape1)
  %b0n, %m0n, %v0n = AdamOptimizer(%b0, %q0, %m0, %v0, %s0, lr=0.01)
  %b1n, %m1n, %v1n = AdamOptimizer(%b1, %q1, %m1, %v1, %s1, lr=0.01)
  %w0n = SGDOptimizer(%w0, %t0, lr=0.1)
  %w1n = SGDOptimizer(%w1, %t1, lr=0.1)
  return %b0n, %b1n, %m0n, %m1n, %v0n, %v1n, %w0n, %w1n
}
"""


@pytest.mark.parametrize("strategy", [
    {"builder": "merge-all"}, {"builder": "ps", "device": 1}, {"builder": "zero-1"},
    {"builder": "zero-2"}, {"builder": "chunk", "k": 2, "compress": "fp16"},
    {"builder": "hierarchical", "node_size": 1}, {"builder": "partitioned-ps"},
], ids=str)
def test_a_gradient_viewed_after_its_all_reduce(strategy: dict[str, Any]) -> None:
    """A gradient that reaches its optimizer through views of its all-reduce's result
    (``dtp``'s tower reshapes a bias gradient after summing it) is found, its views moved
    before the communication."""
    fn = parse(VIEWED).entry
    grads = gradients(fn)
    assert [len(g.views[0]) for g in grads] == [0, 1]
    assert grads[1].type.shape == (4,)
    ins = _replicated_inputs(fn, seed=3)
    got = execute(synchronize(fn, strategy), ins)
    _close(got, execute(fn, ins), 1e-2 if "compress" in strategy else 1e-5)


def test_bucket_structure() -> None:
    fn = _mlp_dp(2, layers=5)
    grads = gradients(fn)
    assert [g.index for g in grads] == list(range(5))
    # Readiness order: the last layer's gradient first.
    # (The weight's name less its placement suffix: dtp's tower writes w4_dp0, the
    # passes w4_d0.)
    assert [g.weight.split("_")[0] for g in grads] == [f"w{i}" for i in range(4, -1, -1)]
    per = synchronize(fn, {"builder": "per-gradient"})
    assert dumps(per) == dumps(with_updates_inlined(fn))  # dtp's @update written out
    merged = synchronize(fn, {"builder": "merge-all"})
    kinds = [op.op_type for op in merged.ops if op.op_type.startswith("MPI")]
    assert kinds == ["MPIAllreduceBucket"]
    (b,) = [op for op in merged.ops if op.op_type == "MPIAllreduceBucket"]
    assert b.attrs["tensors"] == 5
    # Issued where the last gradient becomes ready: right after its MatMulGrad.
    i = merged.ops.index(b)
    assert merged.ops[i - 1].op_type == "MatMulGrad"
    chunks = synchronize(fn, {"builder": "chunk", "k": 2})
    sizes = [op.attrs.get("tensors", 1) for op in chunks.ops if op.op_type.startswith("MPIAll")]
    assert sizes == [2, 2, 1]


def test_ddp_buckets_follow_readiness_and_caps() -> None:
    fn = _mlp_dp(2, layers=6)
    grads = gradients(fn)  # readiness: w5 (8 x 4) first, then w4 .. w0 (8 x 8 each)
    small, big = grads[0].nbytes, grads[1].nbytes
    assert small < big
    plan = resolve(fn, {"builder": "ddp", "bucket_bytes": 3 * big, "first_bucket_bytes": small})
    # The first bucket closes at its own cap, the others once they hold the bucket cap.
    assert [p.group for p in plan] == [0, 1, 1, 1, 2, 2]
    default = resolve(fn, {"builder": "ddp"})
    assert sum(g.nbytes for g in grads) < DDP_FIRST_BUCKET_BYTES
    assert {p.group for p in default} == {0}


def test_plans_round_trip_as_json() -> None:
    fn = _mlp_dp(2)
    plan = resolve(fn, {"builder": "chunk", "k": 3, "compress": "fp16"})
    import json

    again = resolve(fn, json.loads(dumps_strategy(plan)))
    assert again == plan
    assert synchronize(fn, plan).ops  # a resolved plan is accepted too
    assert plan[0] == VarSync("allreduce", group=0, compress="fp16")


@pytest.mark.parametrize("strategy, message", [
    ({"builder": "nope"}, "unknown builder 'nope'"),
    ({"builder": "chunk"}, "k must be an int >= 1"),
    ({"variables": [{"sync": "allreduce"}]}, "one entry per gradient, 4"),
    ({"builder": "ps", "device": 7}, "device 7 holds no replica"),
    ({"builder": "ddp", "compress": "int8"}, "compress must be one of"),
    ({"variables": [{"sync": "allreduce", "group": 0, "compress": "fp16"},
                    {"sync": "allreduce", "group": 0}, {}, {}]}, "a bucket holds one dtype"),
    ({"variables": [{"sync": "zero", "stage": 3}, {}, {}, {}]}, "stage must be 1 or 2"),
    ({"variables": [{"sync": "magic"}, {}, {}, {}]}, "sync must be one of"),
    ({"colour": 1}, "unknown keys"),
    ({}, "give a builder, bucket_bytes or variables"),
])
def test_bad_strategies_are_one_line(strategy: dict[str, Any], message: str) -> None:
    with pytest.raises(TransformError, match=message) as e:
        synchronize(_mlp_dp(2), strategy)
    assert "\n" not in str(e.value)


def test_zero_needs_a_divisible_axis() -> None:
    fn = dtp(mlp(batch_size=6, input_dim=9, hidden_dim=8, output_dim=4, num_layers=2), dp=3)
    grads = gradients(fn)  # w1 is (8, 4): 8 rows do not split in 3
    with pytest.raises(TransformError, match="ZeRO shards axis 0 over 3 replicas"):
        synchronize(fn, {"variables": [{"sync": "zero"}] * len(grads)})
    # The builder all-reduces what it cannot shard.
    plan = resolve(fn, {"builder": "zero-2"})
    assert [p.kind for p in plan] == ["allreduce", "zero"]
    ins = _replicated_inputs(fn)
    _close(execute(synchronize(fn, plan), ins), execute(fn, ins), 1e-5)


def test_not_a_data_parallel_program() -> None:
    one = mlp(batch_size=4, input_dim=8, hidden_dim=8, output_dim=4, num_layers=2)
    with pytest.raises(TransformError, match="no gradient all-reduce"):
        synchronize(one, {"builder": "ddp"})


def test_bucket_read_before_its_last_member_is_refused() -> None:
    src = """func @main(%a0: Tensor[Float32, (4,), 0], %a1: Tensor[Float32, (4,), 1],
           %b0: Tensor[Float32, (4,), 0], %b1: Tensor[Float32, (4,), 1]) {
  %s0, %s1 = MPIAllreduce(%a0, %a1)
  %u0 = SGDOptimizer(%a0, %s0, lr=0.1)
  %u1 = SGDOptimizer(%a1, %s1, lr=0.1)
  %t0, %t1 = MPIAllreduce(%b0, %b1)
  %v0 = SGDOptimizer(%b0, %t0, lr=0.1)
  %v1 = SGDOptimizer(%b1, %t1, lr=0.1)
  return %u0, %u1, %v0, %v1
}
"""
    fn = parse(src).entry
    with pytest.raises(TransformError, match="before gradient 1 is ready"):
        synchronize(fn, {"builder": "merge-all"})
    assert synchronize(fn, {"builder": "ps"}).ops


@pytest.fixture(scope="module")
def gloo2() -> Iterator[Session]:
    with Session(2, "gloo", timeout_s=60) as s:
        yield s


def test_a_sample_runs_on_gloo(gloo2: Session) -> None:
    fn = _adam_dp(2)
    ins = _replicated_inputs(fn, seed=6)
    want = execute(fn, ins)
    for strategy in ({"builder": "merge-all"}, {"builder": "ps", "device": 1},
                     {"builder": "zero-2"}, {"builder": "chunk", "k": 2, "compress": "fp16"}):
        res = gloo2.run(synchronize(fn, strategy), ins, steps=1, warmup=0)
        assert res.status == "ok", (strategy, res.message)
        # (The backend returns Adam's 0-d step counter as shape (1,), with or without
        # synchronize: compare it by value.)
        got = [g.reshape(()) if w.ndim == 0 and g.size == 1 else g
               for g, w in zip(res.outputs, want)]
        _close(got, want, 1e-2 if "compress" in strategy else 1e-5)
