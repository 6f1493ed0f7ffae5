"""A Hugging Face causal LM exported without an attention mask (``model(input_ids)``, as
users export it): ``transformers`` then builds the causal mask inside the graph from the
positions and the batch size (``Range`` over ``Shape(input_ids)[0]``, ``GatherND`` of the
expanded positions per sample, a ``CumSum`` that finds packed sequences), and the batch
split must reach that mask through those ops (``Sharding._pull_batch``) for D and K to
apply. Each configuration computes the sequential results (reference executor)."""

from __future__ import annotations

import numpy as np
import onnx  # noqa: F401 - the test needs it
import pytest
import transformers

import distir
from distir.transforms import analyze, dtp, training_step
from tests.zoo.export import ExportFailed, exported
from tests.zoo.models import SEQ, Spec, _seeded, _tokens

VOCAB = 128
BATCH = 4


def _gpt2_lm() -> object:
    from torch import nn

    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4,
                                  n_positions=64, use_cache=False)

    class Logits(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = transformers.GPT2LMHeadModel(cfg)

        def forward(self, ids):  # type: ignore[no-untyped-def]
            return self.model(input_ids=ids, return_dict=False)[0]

    return Logits()


SPEC = Spec("gpt2_lm_nomask", "transformers", _seeded(_gpt2_lm), _tokens(VOCAB, False),
            ("input_ids",), ({0: "batch", 1: "seq"},))


@pytest.fixture(scope="module")
def model() -> distir.Module:
    try:
        path = exported(SPEC, "dynamo").path
    except ExportFailed as e:
        pytest.skip(f"the dynamo exporter fails on GPT2LMHeadModel here: {e}")
    return distir.import_onnx(path, dims={"batch": BATCH, "seq": SEQ})


def test_the_mask_is_made_from_the_batch_size(model: distir.Module) -> None:
    ops = {op.op_type for op in model.entry.ops}
    assert {"Range", "GatherND", "CumSum"} <= ops  # the graph this test is about
    assert analyze(model.entry).sharding.batch_error is None


@pytest.mark.parametrize("cfg", [(2, 1, 1, 1), (1, 1, 1, 2), (2, 1, 2, 2), (2, 2, 1, 1)],
                         ids=lambda c: "D{}T{}P{}K{}".format(*c))
def test_inference_distributes(model: distir.Module, cfg: tuple[int, int, int, int]) -> None:
    ins = [t.numpy() for t in SPEC.inputs(BATCH, SEQ)]
    want = distir.execute(model.entry, ins)
    dp, tp, pp, k = cfg
    sc = dtp(model.entry, dp=dp, tp=tp, pp=pp, microbatches=k, self_contained=True)
    got = distir.execute(sc, ins, check_types=False)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("cfg", [(2, 1, 1, 2), (1, 1, 2, 2)],
                         ids=lambda c: "D{}T{}P{}K{}".format(*c))
def test_training_step_distributes(model: distir.Module, cfg: tuple[int, int, int, int],
                                   ) -> None:
    from distir.analysis import type_env

    step = training_step(model.entry, loss="cross_entropy", optimizer="sgd", reduction="mean")
    target = type_env(step)[step.params[-1]]
    labels = np.random.default_rng(0).integers(0, VOCAB, size=target.shape).astype(np.int64)
    ins = [t.numpy() for t in SPEC.inputs(BATCH, SEQ)] + [labels]
    want = distir.execute(step, ins)
    dp, tp, pp, k = cfg
    sc = dtp(step, dp=dp, tp=tp, pp=pp, microbatches=k, self_contained=True)
    got = distir.execute(sc, ins, check_types=False)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("cfg", [(2, 2, 1, 1), (2, 2, 2, 2)],
                         ids=lambda c: "D{}T{}P{}K{}".format(*c))
def test_one_replica_gathers_over_the_replicas(model: distir.Module,
                                               cfg: tuple[int, int, int, int]) -> None:
    """The exporter's attention reshapes the queries ``(batch, heads, seq, d)`` to
    ``(batch·heads, seq, d)``: under D x T the merged dimension would be split by both mesh
    axes, which a layout does not express, so the passes gather the queries over the
    replicas. Replica 0's program (what the grid search simulates) writes its part of that
    gather (``ReplicaAllgather``, where it was refused before) and simulates as the program
    of every replica."""
    from distir.analysis.hardware import load_hardware
    from distir.analysis.simulator import simulate
    from distir.transforms.spmd import compose_dtp, compose_dtp_replica
    from tests.analysis.test_simulator_replicas import assert_same_as_every_replica

    hw = load_hardware("h100-sxm")
    an = analyze(training_step(model.entry, loss="cross_entropy", optimizer="adam"))
    dp, tp, pp, k = cfg
    one = compose_dtp_replica(an, dp, tp, pp, k)
    assert (one.replicas, one.peers) == (dp, tp)
    kinds = {op.op_type for f in (one.fn, *one.fn.reachable()) for op in f.ops}
    assert "ReplicaAllgather" in kinds
    full = compose_dtp(an, dp, tp, pp, k)
    assert one.num_ops(inline_calls=True) == full.num_ops(inline_calls=True)
    assert_same_as_every_replica(simulate(one, hw), simulate(full, hw))


def test_no_replica_form_writes_every_replica(model: distir.Module,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Where a collective over the replicas has no replica-0 form (a reduce-scatter; here
    made so by refusing every one), replica 0's program is the program of every replica,
    a ``ReplicaProgram`` of one replica, and simulates as it."""
    from distir.analysis.simulator import simulate
    from distir.transforms.spmd import compose_dtp, compose_dtp_replica
    from distir.transforms.spmd.stage_values import NoReplicaForm, StageValues

    def refuse(self: object, *args: object) -> None:
        raise NoReplicaForm("no replica form")

    monkeypatch.setattr(StageValues, "_replica_part", refuse)
    an = analyze(training_step(model.entry, loss="cross_entropy", optimizer="sgd"))
    one = compose_dtp_replica(an, 2, 2, 1, 1)
    assert (one.replicas, one.stride, one.peers) == (1, 4, 1)
    full = compose_dtp(an, 2, 2, 1, 1)
    assert distir.dumps(one.fn) == distir.dumps(full)
    assert simulate(one, "h100-sxm").latency_s == simulate(full, "h100-sxm").latency_s
