"""Prepare the 4-GPU study (run here, on the CPU): HF BERT-base (12 layers, hidden 768,
12 heads, vocabulary 30522) exported with torch.onnx, imported at 4 x 16 sequences of 128
tokens, its training step (cross entropy, SGD) written as DistIR text without weights
(random on the device), and the strategies to measure, the searched ones found here by
``sync_search`` on each profile the device may be (h100-sxm, h200-sxm).

    PYTHONPATH=. .venv/bin/python grid_search/results/sync-bert-4gpu/prepare.py
Writes bert_step.dir, bert_step.npz and strategies.json beside this file.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch

import distir
from distir.ir.text import write_weights
from distir.transforms import analyze, dtp, training_step
from grid_search.sync_search import builder_strategies, sync_search

HERE = Path(__file__).parent
D = 4
PER_REPLICA, SEQ = 16, 128


def build() -> torch.nn.Module:
    from transformers import BertConfig, BertModel

    from tests.zoo.models import _FirstOutput

    torch.manual_seed(0)
    return _FirstOutput(BertModel(BertConfig(), add_pooling_layer=False)).eval()


def main() -> None:
    from tests.zoo.export import exported
    from tests.zoo.models import BY_NAME, Spec, _tokens

    base = BY_NAME["bert"]
    spec = Spec("bert-base", base.family, build, _tokens(30522, True), base.input_names,
                base.dynamic)
    m = distir.import_onnx(exported(spec, "torchscript").path,
                           dims=spec.dims(batch=D * PER_REPLICA, seq=SEQ))
    step = training_step(m.entry, loss="cross_entropy", optimizer="sgd", lr=1e-4)
    fn = dtp(analyze(step), dp=D)
    # The weight matrices become inputs (random on the device); small constants (masks,
    # position ids, norms and biases) stay in bert_step.npz.
    small = {k: v for k, v in step.initializers.items() if np.asarray(v).size <= 4096}
    (HERE / "bert_step.dir").write_text(distir.dumps(step), encoding="utf-8")
    write_weights(HERE / "bert_step.npz", small)
    again = distir.load(HERE / "bert_step.dir")
    dtp(analyze(again.entry), dp=D)  # what the device will do
    n = len(__import__("distir.transforms.synchronize", fromlist=["x"]).gradients(fn))
    chosen = ("per-gradient", "ddp", "merge-all", "chunk-4", "chunk-16", "chunk-64", "ps",
              "ps-lb", "partitioned-ps", "zero-1", "zero-2")
    every = builder_strategies(n)
    strategies: dict[str, dict] = {k: every[k] for k in chosen}
    strategies["hierarchical-2"] = {"builder": "hierarchical", "node_size": 2}
    strategies["fp16-per-gradient"] = {"builder": "per-gradient", "compress": "fp16"}
    strategies["powersgd-4"] = {"builder": "powersgd", "rank": 4}
    searched = {}
    for hw in ("h100-sxm", "h200-sxm"):
        t = time.time()
        res = sync_search(fn, hw, patience=20, max_evals=300, samples=150)
        searched[hw] = {"strategy": res.strategy(), "best_s": res.best_s,
                        "best_from": res.best_from, "builders_s": res.builders,
                        "evaluated": res.evaluated, "seconds": time.time() - t}
        print(hw, res.best_from, res.best_s, min(res.builders.values()), flush=True)
    (HERE / "strategies.json").write_text(json.dumps(
        {"dp": D, "per_replica": PER_REPLICA, "seq": SEQ, "gradients": n,
         "strategies": strategies, "searched": searched}, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
