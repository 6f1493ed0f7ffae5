"""``search_small`` and the Unity paper's 2-GPU MLP (batch 64, 784 -> 512 -> 10, ReLU,
training step): data parallelism communicates 813,056 elements per step, the plan of
Unity's figure 131,072, and the search finds plans at most that."""

from __future__ import annotations

from functools import cache

import pytest

import distir
from distir.errors import ConfigError
from distir.transforms.spmd import (
    Mesh,
    Partial,
    R,
    Shard,
    comm_breakdown,
    communicated_elements,
    lower,
    propagate,
    search_small,
)
from distir.transforms.tower import dtp  # the reference the passes are checked against

S0, S1 = Shard(0), Shard(1)


@cache
def _unity() -> distir.Function:
    return distir.models.mlp(batch_size=64, input_dim=784, hidden_dim=512, output_dim=10,
                             num_layers=2)


def test_unity_data_parallel_count() -> None:
    a = propagate(_unity(), Mesh.of(2), {"x": (S0,), "y": (S0,)})
    assert communicated_elements(lower(a)) == 813_056  # 2 x (784*512 + 512*10)


def test_unity_figure_plan_count() -> None:
    """Layer 0 split along its contraction (x by features, w0 by rows), layer 1 by output
    columns: the 64 x 512 hidden activation is all-reduced forward and its gradient
    backward."""
    seeds = {"x": (S1,), "w0": (S0,), "w1": (S1,), "y": (S1,)}
    out = lower(propagate(_unity(), Mesh.of(2), seeds))
    assert comm_breakdown(out) == {("MPIAllreduce", (64, 512), 2): 2}
    assert communicated_elements(out) == 131_072


def test_search_beats_unity_figure() -> None:
    r = search_small(_unity(), Mesh.of(2))
    assert r.exact
    assert r.elements <= 131_072
    assert r.elements == 1_280  # Megatron's pair: only the 64 x 10 product is exchanged
    a = r.assignment
    assert a.params[0] == (S1,) and a.params[1] == (S0,)
    assert a.spec(_unity().ops[2].outputs[0]) == (Partial(),)
    assert r.elements == communicated_elements(r.program)
    # ties on elements go to the shorter simulated step: one all-reduce, as dtp(tp=2)
    assert comm_breakdown(r.program) == comm_breakdown(dtp(_unity(), tp=2))
    assert r.simulated_s > 0


def test_search_with_the_batch_arriving_split() -> None:
    r = search_small(_unity(), Mesh.of(2), fixed={"x": (S0,), "y": (S0,)})
    assert r.assignment.params[2] == (S0,)
    assert r.elements == 64 * 784 + 1_280  # x gathered, then Megatron's pair
    assert r.elements < 131_072


def test_search_keeps_optimizer_state_placed() -> None:
    """Updated weights leave the step placed as the weights came in."""
    r = search_small(_unity(), Mesh.of(2))
    a = r.assignment
    for op in a.prog.ops:
        if op.op_type == "SGDOptimizer":
            assert a.spec(op.outputs[0]) == a.spec(op.inputs[0])


def test_search_time_objective_runs_and_is_consistent() -> None:
    seq = distir.models.mlp(batch_size=8, input_dim=4, hidden_dim=8, output_dim=4,
                            num_layers=2)
    r = search_small(seq, Mesh.of(2), objective="time")
    r.assignment.check()
    assert r.elements == communicated_elements(r.program)
    with pytest.raises(ConfigError, match="objective"):
        search_small(seq, Mesh.of(2), objective="bytes")


def test_search_plan_computes_the_step() -> None:
    import numpy as np

    from distir.analysis import random_inputs

    seq = _unity()
    r = search_small(seq, Mesh.of(2), fixed={"x": (S0,), "y": (S0,)})
    ins = random_inputs(seq, seed=5)
    for g, w in zip(distir.execute(lower(r.assignment, self_contained=True), ins),
                    distir.execute(seq, ins), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-3)  # float32 sums reordered


def test_search_reads_known_values_whole() -> None:
    """A GPT-2 training step's bias gradients sum over axes ``[0, 1]`` (a known value):
    the search reads that list whole (split, the lowering gave each device half of it and
    the lowered program did not type-check), and its plan computes the step."""
    import numpy as np

    from distir.analysis import random_inputs
    from distir.models.gpt2 import GPT2Config
    from distir.transforms.training import training_step

    cfg = GPT2Config(n_layer=1, d_model=16, n_head=2, vocab_size=32, seq_len=8, batch_size=4)
    fn = cfg.build()
    names = [p.name for p in fn.params if p.name != "input_ids"]
    step = training_step(fn, loss="cross_entropy", optimizer="sgd", lr=0.1, wrt=names,
                         reduction="mean")
    r = search_small(step, Mesh.of(2), objective="time", max_states=200)
    a = r.assignment
    known = [s for op, rd in zip(a.prog.ops, a.reads, strict=True) if rd
             for v, s in zip(op.inputs, rd, strict=True)
             if v is not None and s is not None and a.prog.const(v) is not None]
    assert known and all(s == (R,) for s in known)
    ins = random_inputs(step, seed=1)
    for g, w in zip(distir.execute(lower(a, self_contained=True), ins),
                    distir.execute(step, ins), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
