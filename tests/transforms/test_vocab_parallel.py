"""Vocabulary-parallel embedding and LM head with a parallel cross entropy: the builder's
GPT-2 training step (tied ``wte``: the embedding's table is the LM head's weight) split by
vocabulary over the tensor-parallel ranks, against the sequential step (reference executor
and gloo), and the layout rules it rests on."""

from __future__ import annotations

import numpy as np
import pytest

import distir
from distir.analysis import type_env
from distir.transforms import analyze, dtp, training_step
from distir.transforms.layout import Demand, Layout, Reject, T
from distir.transforms.layout_rules import apply_rule

VOCAB = 16


def _step(reduction: str) -> distir.Function:
    fn = distir.models.gpt2(n_layer=2, d_model=8, n_head=2, vocab_size=VOCAB, seq_len=4,
                            batch_size=4)
    return training_step(fn, loss="cross_entropy", optimizer="sgd", reduction=reduction,
                         wrt=[p.name for p in fn.params if p.name != "input_ids"])


def _inputs(step: distir.Function) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, VOCAB, size=p.type.shape).astype(np.int64)  # type: ignore
            if p.type.dtype.name.startswith("Int") else  # type: ignore[union-attr]
            (rng.standard_normal(p.type.shape) * 0.5).astype(np.float32)  # type: ignore
            for p in step.params]


_analyses: dict[str, distir.transforms.Analysis] = {}


def _analysis(reduction: str) -> distir.transforms.Analysis:
    if reduction not in _analyses:
        _analyses[reduction] = analyze(_step(reduction))
    return _analyses[reduction]


def test_every_weight_of_the_blocks_and_the_tied_table_split() -> None:
    an = _analysis("sum")
    sh = an.sharding
    split = {p.name for p in an.fn.params if T in sh.layout[p].marks}
    assert sh.layout[next(p for p in an.fn.params if p.name == "wte")] == Layout((T, None))
    assert {"h.0.attn.c_attn.weight", "h.0.attn.c_proj.weight", "h.1.mlp.c_fc.weight",
            "h.1.mlp.c_proj.weight"} <= split


def test_the_logits_never_cross_the_ranks() -> None:
    """Only ``(..., 1)`` row statistics (and the activations' partial sums) are
    communicated: no collective carries the vocabulary axis."""
    from distir.ir.inline import inline_calls

    flat = inline_calls(dtp(_analysis("sum"), tp=2))
    env = type_env(flat)
    comm = [op for op in flat.ops if op.op_type.startswith("MPI")]
    assert any(op.op_type == "MPIAllgather" for op in comm)
    for op in comm:
        for o in op.outputs:
            assert env[o].shape[-1:] != (VOCAB,), distir.dumps(flat)  # type: ignore


@pytest.mark.parametrize("reduction", ["sum", "mean"])
@pytest.mark.parametrize("cfg", [(1, 2, 1, 1), (1, 4, 1, 1), (2, 2, 1, 2), (1, 2, 2, 2)],
                         ids=lambda c: "D{}T{}P{}K{}".format(*c))
def test_equals_sequential(cfg: tuple[int, int, int, int], reduction: str) -> None:
    an = _analysis(reduction)
    ins = _inputs(an.fn)
    want = distir.execute(an.fn, ins)
    d, t, p, k = cfg
    got = distir.execute(dtp(an, dp=d, tp=t, pp=p, microbatches=k, self_contained=True), ins,
                         check_types=False)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_position_table_of_the_vocabulary_shape_stays_whole() -> None:
    """With as many positions as words, ``wpe``'s gradient and ``wte``'s start from zeros
    of one shape, made by equal ops: the split ones (``wte``'s, by vocabulary) and the
    whole ones (``wpe``'s) must not be computed once and shared (they were: ``wpe``'s
    update then got a half-height gradient)."""
    fn = distir.models.gpt2(n_layer=1, d_model=8, n_head=2, vocab_size=VOCAB, seq_len=VOCAB,
                            batch_size=2)
    step = training_step(fn, loss="cross_entropy", optimizer="sgd",
                         wrt=[p.name for p in fn.params if p.name != "input_ids"])
    ins = _inputs(step)
    want = distir.execute(step, ins)
    got = distir.execute(dtp(step, tp=2, self_contained=True), ins)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_runs_on_gloo() -> None:
    import torch  # noqa: F401 - the test needs it

    an = _analysis("mean")
    ins = _inputs(an.fn)
    want = distir.execute(an.fn, ins)
    res = distir.run(dtp(an, tp=2, self_contained=True), ins, backend="gloo", steps=1,
                     warmup=0, timeout_s=120)
    assert res is not None and res.outputs is not None
    for g, w in zip(res.outputs, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def _rule(op: str, ins: tuple, shapes: tuple, outs: tuple, attrs: dict,
          consts: dict | None = None) -> tuple:
    return apply_rule(op, ins, shapes, outs, attrs, lambda i: (consts or {}).get(i))


def test_rules() -> None:
    rows = Layout((T, None))
    # a lookup in a table split by rows: partial over the ranks
    got = _rule("Gather", (rows, Layout(("b", None))), ((16, 8), (4, 4)), ((4, 4, 8),), {})
    assert got == ((Layout(("b", None, None)), "t"),)
    # indices known before running that pick one of n fused parts: n groups, as before
    with pytest.raises(Reject) as e:
        _rule("Gather", (rows, Layout(())), ((3, 8), ()), ((8,),), {}, {1: np.array(0)})
    assert e.value.groups == 3
    # the classes are the logits' last axis, the labels follow the others
    logits = Layout(("b", None, T))
    assert _rule("SoftmaxCrossEntropyLoss", (logits, Layout(("b", None))),
                 ((4, 4, 16), (4, 4)), ((),), {}) == ((Layout(()), "b"),)
    with pytest.raises(Demand):
        _rule("SoftmaxCrossEntropyLoss", (logits, Layout((None, None))),
              ((4, 4, 16), (4, 4)), ((),), {})
    with pytest.raises(Reject):  # interleaved groups are not a class split
        _rule("SoftmaxCrossEntropyLoss", (Layout(("b", None, T), 3), Layout(("b", None))),
              ((4, 4, 48), (4, 4)), ((),), {})
    # an embedding's gradient added into rows split like the table
    got = _rule("ScatterND", (rows, Layout(("b", None, None)), Layout(("b", None, None))),
                ((16, 8), (4, 4, 1), (4, 4, 8)), ((16, 8),), {"reduction": "add"})
    assert got == ((rows, "b"),)
    with pytest.raises(Reject):  # a plain scatter would overwrite the ranks' row 0
        _rule("ScatterND", (rows, Layout((None, None, None)), Layout((None, None, None))),
              ((16, 8), (4, 4, 1), (4, 4, 8)), ((16, 8),), {})
