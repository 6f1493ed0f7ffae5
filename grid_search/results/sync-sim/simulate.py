"""Issue 18's simulated results: the searched synchronisation against every builder on the
zoo's training models, MLP 1B, GPT-2 training and a 3-layer BERT (bert-base sizes), on one
node (h200-sxm) and on the multi-node profiles (h100-2x8-ib, t4-4x4-50gbe).

Run from the repository root (CPU only; about 15 minutes on 2 cores):
    PYTHONPATH=. .venv/bin/python grid_search/results/sync-sim/simulate.py
Writes grid_search/results/sync-sim/simulated.json (everything is simulated).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import distir
from distir.models import presets
from distir.transforms import analyze, dtp, training_step
from grid_search.sync_search import sync_search

OUT = Path(__file__).with_name("simulated.json")
SEARCH = {"patience": 10, "max_evals": 150, "samples": 60}


def record(key: str, fn: Any, hw: str, results: dict[str, Any], single: Any = None,
           **budget: Any) -> None:
    t0 = time.perf_counter()
    res = sync_search(fn, hw, **(budget or SEARCH))
    d = res.to_dict()
    d.pop("strategy")
    if single is not None:  # one replica's step without communication
        d["no_sync_s"] = distir.simulate(single, hardware=hw).latency_s
    results[key] = d
    chunks = {k: t for k, t in res.builders.items() if k.startswith("chunk-")}
    chunks["chunk-1"] = res.builders["per-gradient"]
    bc = min(chunks, key=chunks.__getitem__)
    print(f"{key:40s} best {res.best_s * 1e3:9.3f} ms ({res.best_from}); merge-all "
          f"{res.builders['merge-all'] * 1e3:9.3f}; best chunk {bc} {chunks[bc] * 1e3:9.3f}; "
          f"ps {res.builders['ps'] * 1e3:9.3f}; {time.perf_counter() - t0:.0f} s", flush=True)
    OUT.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")


def zoo(results: dict[str, Any]) -> None:
    from tests.zoo.export import ExportFailed, exported
    from tests.zoo.models import SPECS

    for spec in SPECS:
        try:
            path = exported(spec, "torchscript").path
        except ExportFailed as e:
            results[f"zoo/{spec.name}"] = {"error": str(e)}
            continue
        m = distir.import_onnx(path, dims=spec.dims(batch=16))
        step = analyze(training_step(m.entry, loss="cross_entropy", optimizer="sgd"))
        record(f"zoo/{spec.name}/dp4/h200-sxm", dtp(step, dp=4), "h200-sxm", results)


def bert3(results: dict[str, Any]) -> None:
    """HF BERT (bert-base sizes: hidden 768, 12 heads, intermediate 3072, vocabulary
    30522) with 3 layers, sequence 128, 32 sequences per replica, SGD."""
    import torch
    from transformers import BertConfig, BertModel

    from tests.zoo.export import exported
    from tests.zoo.models import BY_NAME, Spec, _FirstOutput, _tokens

    def build() -> torch.nn.Module:
        torch.manual_seed(0)
        cfg = BertConfig(num_hidden_layers=3)
        return _FirstOutput(BertModel(cfg, add_pooling_layer=False)).eval()

    base = BY_NAME["bert"]
    spec = Spec("bert3-base", base.family, build, _tokens(30522, True), base.input_names,
                base.dynamic)
    path = exported(spec, "torchscript").path
    for dp in (4, 8):
        m = distir.import_onnx(path, dims=spec.dims(batch=32 * dp, seq=128))
        step = analyze(training_step(m.entry, loss="cross_entropy", optimizer="sgd"))
        one = distir.import_onnx(path, dims=spec.dims(batch=32, seq=128))
        single = training_step(one.entry, loss="cross_entropy", optimizer="sgd")
        record(f"bert3-base/dp{dp}/h200-sxm", dtp(step, dp=dp), "h200-sxm", results, single,
               patience=5, max_evals=60, samples=30)


def presets_(results: dict[str, Any]) -> None:
    for dp, hw in ((4, "h200-sxm"), (8, "h200-sxm"), (16, "h100-2x8-ib"),
                   (16, "t4-4x4-50gbe")):
        fn = dtp(presets.build("mlp-1b", batch_size=8192), dp=dp)
        record(f"mlp-1b/dp{dp}/{hw}", fn, hw, results)
    fn = dtp(presets.build("gpt2-1.6b-train", batch_size=4), dp=4)
    record("gpt2-1.6b-train/b4/dp4/h200-sxm", fn, "h200-sxm", results,
           patience=5, max_evals=60, samples=30)
    for hw in ("h100-2x8-ib", "t4-4x4-50gbe"):
        fn = dtp(presets.build("gpt2-350m-train", batch_size=16), dp=16)
        record(f"gpt2-350m-train/b16/dp16/{hw}", fn, hw, results,
               patience=3, max_evals=40, samples=20)


def main() -> None:
    results: dict[str, Any] = {}
    if OUT.exists():
        results = json.loads(OUT.read_text(encoding="utf-8"))
    parts = sys.argv[1:] or ["presets", "bert3", "zoo"]
    for p in parts:
        {"presets": presets_, "bert3": bert3, "zoo": zoo}[p](results)


if __name__ == "__main__":
    main()
