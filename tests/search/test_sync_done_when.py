"""Issue 18's simulation checks: on every zoo training model and the MLP the searched
synchronisation is at least as fast as every builder; merge-all is slower than the best
chunk size on at least two models (MLP 1B, GPT-2 1.6B training); all-reduce beats the
parameter server for a 3-layer BERT on one node. Small search budgets (CI); the recorded
full-size figures are in grid_search/results/sync-sim/."""

from __future__ import annotations

import math

import pytest

import distir
from distir.ir import Function
from distir.models import presets
from distir.models.mlp import mlp
from distir.transforms import analyze, dtp, synchronize, training_step
from grid_search.sync_search import SyncSearchResult, sync_search
from tests.transforms.zoo_models import zoo_analysis
from tests.zoo.models import SPECS

BUDGET = {"patience": 1, "max_evals": 20, "samples": 4}


def _check(fn: Function, hw: str) -> SyncSearchResult:
    res = sync_search(fn, hw, **BUDGET)  # type: ignore[arg-type]
    assert math.isfinite(res.best_s)
    for name, t in res.builders.items():
        assert res.best_s <= t, (name, t, res.best_s)
    again = distir.simulate(synchronize(fn, res.strategy()), hardware=hw).latency_s
    assert again == pytest.approx(res.best_s)
    return res


@pytest.mark.parametrize("name", [s.name for s in SPECS])
def test_zoo_training_step_searched_is_no_slower_than_any_builder(name: str) -> None:
    m, _ = zoo_analysis(name, "torchscript")
    step = analyze(training_step(m.entry, loss="cross_entropy", optimizer="sgd"))
    _check(dtp(step, dp=4), "h200-sxm")


@pytest.mark.parametrize("hw, dp", [("h200-sxm", 4), ("h100-2x8-ib", 16),
                                    ("t4-4x4-50gbe", 16)])
def test_mlp_searched_is_no_slower_than_any_builder(hw: str, dp: int) -> None:
    step = mlp(batch_size=8 * dp, input_dim=512, hidden_dim=512, output_dim=16, num_layers=6)
    res = _check(dtp(step, dp=dp), hw)
    assert ("hierarchical" in res.builders) == (dp == 16)


def _chunks(res: SyncSearchResult) -> dict[str, float]:
    """The chunk sizes' times, k = 1 (one all-reduce per gradient) included."""
    out = {k: t for k, t in res.builders.items() if k.startswith("chunk-")}
    out["chunk-1"] = res.builders["per-gradient"]
    return out


def test_merge_all_is_slower_than_the_best_chunk_on_two_models() -> None:
    slower = []
    for name, batch in (("mlp-1b", 1024), ("gpt2-1.6b-train", 4)):
        fn = dtp(presets.build(name, batch_size=batch), dp=4)
        res = sync_search(fn, "h200-sxm", patience=1, max_evals=1)  # the builders
        if res.builders["merge-all"] > min(_chunks(res).values()):
            slower.append(name)
    assert slower == ["mlp-1b", "gpt2-1.6b-train"]


def test_all_reduce_beats_the_parameter_server_for_a_3_layer_bert() -> None:
    from tests.zoo.export import exported
    from tests.zoo.models import BY_NAME, Spec

    base = BY_NAME["bert"]

    def bert3():  # type: ignore[no-untyped-def]
        import torch
        from transformers import BertConfig, BertModel

        from tests.zoo.models import _FirstOutput

        torch.manual_seed(0)
        cfg = BertConfig(vocab_size=128, hidden_size=64, num_hidden_layers=3,
                         num_attention_heads=4, intermediate_size=128,
                         max_position_embeddings=64)
        return _FirstOutput(BertModel(cfg, add_pooling_layer=False)).eval()

    spec = Spec("bert3", base.family, bert3, base.inputs, base.input_names, base.dynamic)
    m = distir.import_onnx(exported(spec, "torchscript").path, dims=spec.dims(batch=16))
    step = analyze(training_step(m.entry, loss="cross_entropy", optimizer="sgd"))
    res = sync_search(dtp(step, dp=4), "h200-sxm", patience=1, max_evals=1)
    allreduce = min([res.builders[k] for k in ("per-gradient", "ddp", "merge-all")]
                    + list(_chunks(res).values()))
    ps = min(res.builders[k] for k in ("ps", "ps-lb", "partitioned-ps"))
    assert allreduce < ps
