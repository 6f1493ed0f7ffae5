"""Simulated vs measured for the models of this folder (see README.md): exports each model
here (``export.py``, the HF GPT-2 by ``../graph_zoo_4gpu/export_hf_gpt2.py``), simulates
every configuration of 4 devices with the profiles named, and prints per study Spearman,
median / p90 / worst latency error and top-1 regret beside each configuration.

    python grid_search/results/zoo_host_4gpu/compare.py [--profiles h200-sxm-graph ...]

Measured: call A's CSVs (``call_a/``; ResNet-50's from its printed output,
``call_a/resnet50_measured_ms.txt``) and call D's BERT steps (``call_d/bert_measured_ms.txt``).
Replayed steps are compared with the device-time profile (``h200-sxm-graph``), eager ones
with ``h200-sxm``, as the held-out protocol does (docs/fidelity.md).

Programs that ``dtp`` writes otherwise since they were measured are listed apart and left
out of the figures (``CHANGED``): ResNet-50's 4 stages, cut anywhere since
``partition.LAYER_SLACK`` (they were cut between its two long repeated runs).
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))  # grid_search, run as a script from anywhere
Key = tuple[int, int, int, int]
MODELS = {  # name: (export command args, grid-search args)
    "gpt2": ([str(HERE.parent / "graph_zoo_4gpu" / "export_hf_gpt2.py")],
             ["--dim", "batch=16", "--dim", "seq=512", "--loss", "cross_entropy",
              "--optimizer", "adam"]),
    "bert": ([str(HERE / "export.py"), "bert"],
             ["--dim", "batch=32", "--dim", "seq=512", "--loss", "mse", "--optimizer", "adam"]),
    "resnet50": ([str(HERE / "export.py"), "resnet50"],
                 ["--dim", "batch=128", "--loss", "cross_entropy", "--optimizer", "sgd"]),
}


CHANGED = {"resnet50": {(1, 1, 4, 2), (1, 1, 4, 4)}}
"""Configurations whose program ``dtp`` writes otherwise since they were measured."""


OLD = "measured on the old embedding-gradient kernel"


def _key(r: dict[str, str]) -> Key:
    return (int(r["dp"]), int(r["tp"]), int(r["pp"]), int(r["microbatches"]))


def _csv(path: Path, column: str) -> dict[Key, float]:
    with open(path, encoding="utf-8") as f:
        return {_key(r): float(r[column]) * 1e3 for r in csv.DictReader(f)
                if r.get(column) and r["status"] == "ok"}


def _table(path: Path, mode: str) -> dict[Key, float]:
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        w = line.split()
        if w and not line.startswith("#") and w[0] == mode:
            out[(int(w[1]), int(w[2]), int(w[3]), int(w[4]))] = float(w[5])
    return out


def simulate(model: str, profile: str, work: Path) -> dict[Key, float]:
    onnx = work / f"{model}.onnx"
    if not onnx.exists():
        subprocess.run([sys.executable, *MODELS[model][0], str(onnx)], check=True, cwd=ROOT,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out = work / f"{model}_{Path(profile).stem}.csv"
    subprocess.run([sys.executable, "-m", "distir", "grid-search", "--model", str(onnx),
                    "--devices", "4", "--hardware", profile, "--max-microbatches", "4",
                    "--train", *MODELS[model][1], "-o", str(out)], check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return _csv(out, "latency_s")


def report(name: str, pred: dict[Key, float], meas: dict[Key, float]) -> None:
    """The project's accuracy figures (``grid_search.real.accuracy``) and each row."""
    from grid_search.real import accuracy

    ks = [k for k in meas if k in pred]
    a = accuracy([{"latency_s": pred[k], "measured_latency_s": meas[k]} for k in ks])
    print(f"{name}: {len(ks)} configurations, Spearman {a['spearman']:.3f}, median "
          f"{a['median_latency_error'] * 100:.1f}%, p90 {a['p90_latency_error'] * 100:.1f}%, "
          f"worst {a['worst_latency_error'] * 100:.1f}%, top-1 regret "
          f"{a['top1_regret'] * 100:.1f}%")
    for k in sorted(ks, key=meas.__getitem__):
        print(f"    D{k[0]} T{k[1]} P{k[2]} K{k[3]}: predicted {pred[k]:7.2f} ms, measured "
              f"{meas[k]:7.2f} ms, {(pred[k] / meas[k] - 1) * 100:+.1f}%")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graph-profile", default="h200-sxm-graph")
    ap.add_argument("--eager-profile", default="h200-sxm")
    a = ap.parse_args()
    A, D = HERE / "call_a", HERE / "call_d"
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        g, e = a.graph_profile, a.eager_profile
        studies = [
            ("HF GPT-2 eager, launch 1", "gpt2", e, _csv(A / "hf_gpt2_train_eager.csv",
                                                       "measured_latency_s")),
            ("HF GPT-2 eager, launch 2", "gpt2", e, _csv(A / "hf_gpt2_train_eager_r2.csv",
                                                       "measured_latency_s")),
            (f"BERT replayed (call A, {OLD})", "bert", g,
             _csv(A / "bert_train_graph.csv", "measured_latency_s")),
            (f"BERT eager (call A, {OLD})", "bert", e,
             _csv(A / "bert_train_eager.csv", "measured_latency_s")),
            ("BERT replayed (call D)", "bert", g, _table(D / "bert_measured_ms.txt", "graph")),
            ("BERT eager (call D)", "bert", e, _table(D / "bert_measured_ms.txt", "eager")),
            ("ResNet-50 replayed", "resnet50", g, _table(A / "resnet50_measured_ms.txt",
                                                         "graph")),
            ("ResNet-50 eager", "resnet50", e, _table(A / "resnet50_measured_ms.txt", "eager")),
        ]
        sims: dict[tuple[str, str], dict[Key, float]] = {}
        for name, model, prof, meas in studies:
            if (model, prof) not in sims:
                sims[(model, prof)] = simulate(model, prof, work)
            gone = CHANGED.get(model, set()) & set(meas)
            report(f"{name}, simulated with {prof}", sims[(model, prof)],
                   {k: v for k, v in meas.items() if k not in gone})
            for k in sorted(gone):
                print(f"    D{k[0]} T{k[1]} P{k[2]} K{k[3]}: measured {meas[k]:7.2f} ms on a "
                      f"program dtp no longer writes; predicted today "
                      f"{sims[(model, prof)][k]:7.2f} ms")


if __name__ == "__main__":
    main()
