"""Vocabulary-parallel lookup, embedding gradient and cross entropy in the spmd passes:
rules, lowering (against the reference executor) and ``dtp``'s communication."""

from __future__ import annotations

from functools import cache

import pytest

import distir
from distir.analysis import type_env
from distir.analysis.values import type_of
from distir.transforms.program import Program
from distir.transforms.spmd import Mesh, P, R, Shard, comm_breakdown, lower, propagate
from distir.transforms.spmd.compose import compose_dtp
from distir.transforms.spmd.rules import NotLocal, OpRules
from distir.transforms.tower import dtp  # the reference the passes are checked against
from tests.transforms.spmd.test_pipeline import _same

# a vocabulary of 512 x d 16: the zeros its gradient is scattered into are too large to be
# known before running, so the lowering writes them (an Expand), at the local shape
VOCAB, D = 512, 16


@cache
def _gpt2() -> distir.Function:
    from distir.models.gpt2 import GPT2Config

    return GPT2Config(n_layer=2, d_model=D, n_head=8, vocab_size=VOCAB, seq_len=8,
                      batch_size=8).build()


@cache
def _step() -> distir.Function:
    from distir.transforms.training import training_step

    fn = _gpt2()
    names = [p.name for p in fn.params if p.name != "input_ids"]
    return training_step(fn, loss="cross_entropy", optimizer="sgd", lr=0.1, wrt=names,
                         reduction="mean")


def _op(prog: Program, op_type: str, input0: str) -> distir.Op:
    return next(op for op in prog.ops if op.op_type == op_type
                and op.inputs[0] is not None and op.inputs[0].name == input0)


def test_rules_accept_the_vocabulary_splits() -> None:
    """On the axis that splits the table (or the classes), with ids (labels) whole: the
    lookup is partial, the loss whole, its gradient class-split; ids split on that axis
    too, or a sum-less cross entropy, are refused."""
    prog = Program(_step())
    rules = OpRules(prog, Mesh.of(2, 2))
    look = _op(prog, "Gather", "wte")
    assert rules.apply(look, ((R, Shard(0)), (Shard(0), R))).outs == ((Shard(0), P),)
    with pytest.raises(NotLocal, match="indexed axis"):
        rules.apply(look, ((R, Shard(0)), (R, Shard(0))))
    loss = _op(prog, "SoftmaxCrossEntropyLoss", "logits")
    grad = _op(prog, "SoftmaxCrossEntropyLossGrad", "logits")
    split = ((Shard(0), Shard(2)), (Shard(0), R))
    got = rules.apply(loss, split)
    assert got.outs == ((P, R),) and got.scaled == ((0,),)  # a mean over the data axis only
    assert rules.apply(grad, split).outs == ((Shard(0), Shard(2)),)
    with pytest.raises(NotLocal, match="class axis"):
        rules.apply(loss, ((R, Shard(2)), (R, Shard(1))))


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_training_step_lowered_equals_sequential(tp: int) -> None:
    """``wte`` by rows on a ``tp`` mesh: the masked lookup, the tied LM head's class-split
    logits, the parallel cross entropy and the gradient scattered into each device's rows
    (zeros made at the local shape); equal to the sequential step, without gathering the
    table, its gradient or the logits."""
    step = _step()
    prog = Program(step)
    a = propagate(step, Mesh.of(tp), {"wte": (Shard(0),)} | _zeros_seed(prog, tp))
    _same(step, lower(a, self_contained=True))
    placed = lower(a)
    big = {(VOCAB // tp, D), (D, VOCAB // tp), (8, 8, VOCAB // tp)}
    assert not any(k[0] == "MPIAllgather" and k[1] in big for k in comm_breakdown(placed))
    env = type_env(placed)
    made = [type_of(env[op.outputs[0]]).shape for op in placed.ops if op.op_type == "Expand"
            and type_of(env[op.outputs[0]]).shape[-1] == D]  # type: ignore[union-attr]
    assert made and all(s[0] == VOCAB // tp for s in made)


def _zeros_seed(prog: Program, tp: int) -> dict:
    """The zeros ``wte``'s gradient is scattered into, by rows (as ``compose_dtp`` seeds)."""
    from distir.transforms.plan import analyze
    from distir.transforms.spmd.compose import dtp_layout_seeds

    seeds = dtp_layout_seeds(prog, analyze(prog.fn), False, tp)
    got = {v: (s[1],) for v, s in seeds.items() if v not in prog.param_set
           and isinstance(s[1], Shard)}
    assert len(got) == 1
    return got


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_inference_lowered_equals_sequential(tp: int) -> None:
    fn = _gpt2()
    _same(fn, lower(propagate(fn, Mesh.of(tp), {"wte": (Shard(0),)}), self_contained=True))


@pytest.mark.parametrize("dp,tp,pp,k", [(1, 2, 1, 1), (1, 4, 1, 1), (1, 8, 1, 1),
                                        (2, 2, 1, 2), (2, 4, 1, 1), (1, 2, 2, 2),
                                        (2, 2, 2, 1), (1, 4, 2, 2)])
def test_composition_equals_sequential(dp: int, tp: int, pp: int, k: int) -> None:
    _same(_step(), compose_dtp(_step(), dp, tp, pp, k, self_contained=True))


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_composition_communicates_as_dtp(tp: int) -> None:
    """Tensor parallelism on the GPT-2 step: ``dtp``'s collectives, op for op (the
    cross entropy's ``(B, S, 1)`` all-gathers and all-reduces, the lookup's all-reduce)."""
    ours = comm_breakdown(compose_dtp(_step(), 1, tp))
    assert ours == comm_breakdown(dtp(_step(), 1, tp))
    assert ours[("MPIAllgather", (8, 8, 1), tp)] == 2
    assert ours[("MPIAllreduce", (8, 8, 1), tp)] == 3
