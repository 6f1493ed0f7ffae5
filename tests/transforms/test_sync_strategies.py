"""The hierarchical all-reduce, the partitioned parameter server and PowerSGD: the first
two give the reference executor's update (float summation order aside); PowerSGD equals a
numpy PowerSGD on the same inputs, and at full rank recovers the exact sum."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import distir
from distir.analysis import execute
from distir.backend import Session
from distir.errors import TransformError
from distir.ir import Function, parse
from distir.transforms import synchronize
from distir.transforms.synchronize import gradients, resolve, servers, state_names
from tests.transforms.test_synchronize import _adam_dp, _close, _mlp_dp, _replicated_inputs

EXACT: list[dict[str, Any]] = [
    {"builder": "hierarchical", "node_size": 2},
    {"builder": "hierarchical", "node_size": 1},
    {"builder": "hierarchical", "node_size": 4},
    {"builder": "hierarchical", "node_size": 3},
    {"builder": "partitioned-ps"},
    {"builder": "partitioned-ps", "shards": 2},
    {"variables": [{"sync": "ps", "device": 2, "shards": 2, "axis": 1},
                   {"sync": "ps", "device": 3, "shards": 4, "axis": 0},
                   {"sync": "hierarchical", "node_size": 2},
                   {"sync": "allreduce", "group": 0}]},
]


@pytest.fixture(scope="module")
def mlp4() -> tuple[Function, list[np.ndarray], list[np.ndarray]]:
    fn = _mlp_dp(4)
    ins = _replicated_inputs(fn, seed=3)
    return fn, ins, execute(fn, ins)


@pytest.mark.parametrize("strategy", EXACT, ids=str)
def test_exact_strategies_give_the_reference_update(
        mlp4: tuple[Function, list[np.ndarray], list[np.ndarray]],
        strategy: dict[str, Any]) -> None:
    fn, ins, want = mlp4
    out = synchronize(fn, strategy)
    _close(execute(out, ins), want, 1e-5)
    for hw in ("h200-sxm", "t4-4x4-50gbe"):
        assert distir.simulate(out, hardware=hw).latency_s > 0


def test_hierarchical_structure_and_compression(
        mlp4: tuple[Function, list[np.ndarray], list[np.ndarray]]) -> None:
    fn, ins, want = mlp4
    out = synchronize(fn, {"builder": "hierarchical", "node_size": 2})
    kinds = [op.op_type for op in out.ops if op.op_type.startswith("MPI")]
    n = len(gradients(fn))
    # Per gradient: a reduce in each of the 2 nodes, the leaders' all-reduce, 2 broadcasts.
    assert kinds.count("MPIReduce") == 2 * n and kinds.count("MPIAllreduce") == n
    assert kinds.count("MPIBroadcast") == 2 * n
    (ar,) = [op for op in out.ops if op.op_type == "MPIAllreduce"][:1]
    assert len(ar.inputs) == 2  # across the two leaders only
    comp = synchronize(fn, {"builder": "hierarchical", "node_size": 2, "compress": "fp16"})
    got = execute(comp, ins)
    for g, w, w0 in zip(got, want, ins[:len(got)]):
        np.testing.assert_allclose(g, w, atol=np.abs(w - w0).max() * 2.0 ** -7 + 1e-7)


def test_partitioned_ps_puts_shards_on_distinct_servers(
        mlp4: tuple[Function, list[np.ndarray], list[np.ndarray]]) -> None:
    fn, _, _ = mlp4
    grads = gradients(fn)
    plan = resolve(fn, {"builder": "partitioned-ps"})
    for gr, p in zip(grads, plan):
        assert p.kind == "ps" and p.shards == 4
        assert sorted(servers(gr, p)) == sorted(gr.devices)
    out = synchronize(fn, plan)
    reduces = [op for op in out.ops if op.op_type == "MPIReduce"]
    assert len(reduces) == 4 * len(grads)
    assert {op.attrs["device"] for op in reduces} == set(grads[0].devices)


def test_partitioned_ps_with_adam() -> None:
    fn = _adam_dp(2)
    ins = _replicated_inputs(fn, seed=5)
    want = execute(fn, ins)
    # w0 (6, 4) and w1 (4, 2) split in 2 along either axis; the (4,) bias along axis 0.
    for axis in (0, 1):
        vs = [{"sync": "ps", "shards": 2, "axis": axis if gr.type.rank == 2 else 0,
               "device": 1} for gr in gradients(fn)]
        _close(execute(synchronize(fn, {"variables": vs}), ins), want, 1e-5)


@pytest.mark.parametrize("strategy, message", [
    ({"builder": "hierarchical"}, "node_size must be an int >= 1"),
    ({"variables": [{"sync": "ps", "shards": 3}, {}, {}, {}]}, "3 equal shards along axis 0"),
    ({"variables": [{"sync": "ps", "shards": 2, "axis": 5}, {}, {}, {}]}, "along axis 5"),
    ({"variables": [{"sync": "powersgd", "rank": 9}, {}, {}, {}]}, "rank 9 exceeds"),
    ({"variables": [{"sync": "powersgd", "compress": "fp16"}, {}, {}, {}]}, "no compress"),
])
def test_bad_new_strategies_are_one_line(strategy: dict[str, Any], message: str) -> None:
    with pytest.raises(TransformError, match=message) as e:
        synchronize(_mlp_dp(4), strategy)
    assert "\n" not in str(e.value)


# -- PowerSGD ------------------------------------------------------------------------------

def _direct(shape: tuple[int, ...], d: int) -> Function:
    """A step whose gradients are its inputs: ``d`` replicas, SGD."""
    t = ", ".join(str(s) for s in shape)
    ps = ", ".join([f"%w{j}: Tensor[Float64, ({t}), {j}]" for j in range(d)]
                   + [f"%g{j}: Tensor[Float64, ({t}), {j}]" for j in range(d)])
    sums = ", ".join(f"%s{j}" for j in range(d))
    body = "\n".join(f"  %u{j} = SGDOptimizer(%w{j}, %s{j}, lr=0.5)" for j in range(d))
    return parse(f"""func @main({ps}) {{
  {sums} = MPIAllreduce({", ".join(f"%g{j}" for j in range(d))})
{body}
  return {", ".join(f"%u{j}" for j in range(d))}
}}
""").entry


def _gram_schmidt(p: np.ndarray) -> np.ndarray:
    out = np.zeros_like(p)
    for k in range(p.shape[1]):
        c = p[:, k]
        for _ in range(2):
            c = c - out[:, :k] @ (out[:, :k].T @ c)
        out[:, k] = c / np.sqrt(c @ c)
    return out


def _numpy_powersgd(gs: list[np.ndarray], qs: list[np.ndarray], es: list[np.ndarray],
                    ) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray]]:
    """PowerSGD with error feedback, summing (not averaging) over replicas: the summed
    approximation, the next Q and E of each replica."""
    d = len(gs)
    a = gs[0].shape[0]
    ms = [g.reshape(a, -1) + e for g, e in zip(gs, es)]
    p = sum(m @ q for m, q in zip(ms, qs))
    ph = _gram_schmidt(p)
    q = sum(m.T @ ph for m in ms)
    approx = ph @ q.T
    return approx.reshape(gs[0].shape), [q] * d, [m - approx / d for m in ms]


@pytest.mark.parametrize("shape, rank", [((6, 5), 2), ((6, 5), 1), ((4, 3, 5), 3)])
def test_powersgd_equals_numpy_powersgd(shape: tuple[int, ...], rank: int) -> None:
    d = 3
    fn = _direct(shape, d)
    out = synchronize(fn, {"variables": [{"sync": "powersgd", "rank": rank}]})
    (gr,) = gradients(fn)
    qn, en = state_names(gr)
    assert [p.name for p in out.params[2 * d:]] == qn + en
    rng = np.random.default_rng(0)
    a, b = shape[0], int(np.prod(shape[1:]))
    w = rng.normal(size=shape)
    gs = [rng.normal(size=shape) for _ in range(d)]
    q0 = rng.normal(size=(b, rank))
    es = [rng.normal(size=(a, b)) * 0.1 for _ in range(d)]
    got = execute(out, [w] * d + gs + [q0] * d + es)
    approx, q1, e1 = _numpy_powersgd(gs, [q0] * d, es)
    want_w = execute(fn, [w] * d + [approx / d] * d)
    _close(got[:d], want_w, 1e-10)
    _close(got[d:2 * d], q1, 1e-10)
    _close(got[2 * d:], e1, 1e-10)
    # The errors add up to what the sum lost.
    lost = sum(g.reshape(a, b) + e for g, e in zip(gs, es)) - approx.reshape(a, b)
    np.testing.assert_allclose(sum(got[2 * d:]), lost, atol=1e-10)
    assert distir.simulate(out, hardware="h200-sxm").latency_s > 0


def test_powersgd_at_full_rank_is_the_exact_sum() -> None:
    fn = _mlp_dp(4)  # float32, gradients (8, 8) and (8, 4)
    ins = _replicated_inputs(fn, seed=8)
    want = execute(fn, ins)
    grads = gradients(fn)
    vs = [{"sync": "powersgd", "rank": min(g.type.shape)} for g in grads]
    out = synchronize(fn, {"variables": vs})
    rng = np.random.default_rng(1)
    state: list[np.ndarray] = []
    for gr in grads:
        a, b = gr.type.shape
        state += [rng.normal(size=(b, min(a, b))).astype(np.float32)] * 4
        state += [np.zeros((a, b), np.float32)] * 4
    got = execute(out, ins + state)
    _close(got[:len(want)], want, 1e-4)
    # Nothing lost: each gradient's errors (one per replica) add up to zero.
    errs = [x for x, p in zip(got[len(want):], out.params[len(ins):]) if "_psgd_e_" in p.name]
    assert len(errs) == 4 * len(grads)
    for k in range(len(grads)):
        mine = errs[4 * k:4 * k + 4]
        scale = max(float(np.abs(e).max()) for e in mine)
        assert float(np.abs(sum(mine)).max()) < 1e-5 * scale


def test_powersgd_builder_leaves_vectors_and_thin_matrices_to_all_reduce() -> None:
    fn = _adam_dp(2)  # w1 (4, 2), b0 (4,), w0 (6, 4)
    plan = resolve(fn, {"builder": "powersgd", "rank": 2})
    kinds = {gr.type.shape: p.kind for gr, p in zip(gradients(fn), plan)}
    assert kinds == {(4, 2): "allreduce", (4,): "allreduce", (6, 4): "powersgd"}


@pytest.fixture(scope="module")
def gloo2() -> Iterator[Session]:
    with Session(2, "gloo", timeout_s=60) as s:
        yield s


def test_new_strategies_run_on_gloo(gloo2: Session) -> None:
    fn = _adam_dp(2)
    ins = _replicated_inputs(fn, seed=6)
    want = execute(fn, ins)
    for strategy in ({"builder": "hierarchical", "node_size": 1},
                     {"builder": "hierarchical", "node_size": 2},
                     {"builder": "partitioned-ps", "shards": 2}):
        res = gloo2.run(synchronize(fn, strategy), ins, steps=1, warmup=0)
        assert res.status == "ok", (strategy, res.message)
        got = [g.reshape(()) if w.ndim == 0 and g.size == 1 else g
               for g, w in zip(res.outputs, want)]
        _close(got, want, 1e-5)
    out = synchronize(fn, {"builder": "powersgd", "rank": 2})
    rng = np.random.default_rng(2)
    state = [rng.normal(size=p.type.shape).astype(np.float32)  # type: ignore[union-attr]
             for p in out.params[len(ins):]]
    ref = execute(out, ins + state)
    res = gloo2.run(out, ins + state, steps=1, warmup=0)
    assert res.status == "ok", res.message
    got = [g.reshape(()) if w.ndim == 0 and g.size == 1 else g
           for g, w in zip(res.outputs, ref)]
    _close(got, ref, 1e-4)


# -- several data-parallel groups (tensor or pipeline parallelism beside) ------------------

GROUPS = [({"dp": 2, "tp": 2}, 2), ({"dp": 2, "pp": 2, "microbatches": 2}, 2),
          ({"dp": 2, "tp": 2, "pp": 2, "microbatches": 2}, 4), ({"dp": 2, "microbatches": 2}, 1)]
"""Configurations and their numbers of data-parallel groups (``tp·pp``)."""
TRANSFORMS = ["tower", "dtp"]
"""The builder tower (``distir.transforms.tower``) and ``dtp`` (the spmd passes), which
write gradients differently (the passes: running sums over microbatches, all-reduces
inside layer and stage functions, a bias gradient reshaped before its all-reduce)."""


def _distribute(transform: str, fn: Function, kw: dict[str, Any]) -> Function:
    from distir.transforms import dtp, tower

    return (tower.dtp if transform == "tower" else dtp)(fn, **kw)


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("kw, groups", GROUPS, ids=str)
def test_several_data_parallel_groups(transform: str, kw: dict[str, Any], groups: int) -> None:
    from distir.models.mlp import mlp

    fn = _distribute(transform, mlp(batch_size=8, input_dim=8, hidden_dim=8, output_dim=4,
                                    num_layers=4), kw)
    grads = gradients(fn)
    # Every weight's gradient is found: 4 weights, each in tp shards.
    assert len(grads) == 4 * kw.get("tp", 1)
    assert len({frozenset(g.devices) for g in grads}) == groups
    ins = _replicated_inputs(fn, seed=1)
    want = execute(fn, ins)
    for strategy in ({"builder": "merge-all"}, {"builder": "chunk", "k": 2},
                     {"builder": "ps"}, {"builder": "ps-lb"}, {"builder": "partitioned-ps"},
                     {"builder": "zero-1"}, {"builder": "zero-2"},
                     {"builder": "hierarchical", "node_size": 1}):
        plan = resolve(fn, strategy)
        # A bucket never spans two data-parallel groups.
        for g in {p.group for p in plan if p.kind == "allreduce"}:
            assert len({frozenset(gr.devices) for gr, p in zip(grads, plan)
                        if p.kind == "allreduce" and p.group == g}) == 1
        _close(execute(synchronize(fn, plan), ins), want, 1e-5)


def test_all_reduces_two_calls_deep() -> None:
    """The passes outline the middle stages' equal backward units as one stage function
    calling layer functions: the all-reduce of a gradient completed there is two calls
    below the entry function, and is found."""
    from distir.models.mlp import mlp
    from distir.transforms.spmd.compose import compose_dtp

    fn = compose_dtp(mlp(batch_size=8, input_dim=8, hidden_dim=8, output_dim=8,
                         num_layers=8), dp=2, pp=4, microbatches=2)

    def holds(f: Function) -> bool:
        return any(op.op_type == "MPIAllreduce" for op in f.ops)

    assert any(op.callee is not None and not holds(op.callee)
               and any(c.callee is not None and holds(c.callee) for c in op.callee.ops)
               for op in fn.ops)
    assert len(gradients(fn)) == 8
    ins = _replicated_inputs(fn, seed=4)
    want = execute(fn, ins)
    for strategy in ({"builder": "merge-all"}, {"builder": "zero-2"}, {"builder": "ps-lb"}):
        _close(execute(synchronize(fn, strategy), ins), want, 1e-5)


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("kw", [{"dp": 2}, {"dp": 2, "tp": 2},
                                {"dp": 2, "pp": 2, "microbatches": 2}], ids=str)
def test_gpt2_adam_step(transform: str, kw: dict[str, Any]) -> None:
    """A GPT-2 training step with Adam (biases, layer norms, a tied embedding): every
    builder gives the reference update."""
    from distir.transforms import training_step

    g = distir.models.gpt2(n_layer=2, d_model=8, n_head=2, vocab_size=8, seq_len=4,
                           batch_size=8)
    step = training_step(g, loss="cross_entropy", optimizer="adam",
                         wrt=[p.name for p in g.params if p.name != "input_ids"])
    fn = _distribute(transform, step, kw)
    # Of 28 weights, the positional embedding (a ScatterND of its sum) and, across a stage
    # cut, a bias sent to its update's stage are not found; nor, under dtp's tower, the
    # tied embedding (two sums, transposed and added): docs/synchronization.md.
    assert len(gradients(fn)) >= 25 * kw.get("tp", 1)
    ins = _replicated_inputs(fn, seed=2)
    want = execute(fn, ins)
    assert all(np.isfinite(w).all() for w in want)
    for strategy in ({"builder": "ddp", "bucket_bytes": 256}, {"builder": "ps-lb"},
                     {"builder": "partitioned-ps"}, {"builder": "zero-1"},
                     {"builder": "zero-2"}, {"builder": "hierarchical", "node_size": 1}):
        _close(execute(synchronize(fn, strategy), ins), want, 1e-5)


def test_powersgd_state_names_are_distinct_under_tensor_parallelism() -> None:
    """Every PowerSGD state tensor has a name of its own on a D x T program (the ranks'
    ``_tp{t}`` suffix is kept), so a training loop can feed each one back."""
    import collections

    from distir.transforms import dtp, training_step

    fn = distir.models.gpt2(n_layer=1, d_model=8, n_head=2, vocab_size=8, seq_len=4,
                            batch_size=4)
    step = training_step(fn, loss="cross_entropy", optimizer="sgd",
                         wrt=[p.name for p in fn.params if p.name != "input_ids"])
    prog = dtp(step, dp=2, tp=2)
    out = synchronize(prog, {"builder": "powersgd", "rank": 1})
    new = [p.name for p in out.params[len(prog.params):]]
    assert new and not [n for n, c in collections.Counter(new).items() if c > 1]
