"""Predicted vs measured for the studies of this folder (README.md), twice: with the
predictions ``grid-search --run-top`` wrote beside each measurement (the profile at the
measuring commit, in each call's log), and with the rows simulated again by ``study compare``
against ``--profile`` (default: ``h200-sxm-graph`` as it is now), from the device's own
exports (``call_a/skel/``, filled by ``grid_search.skeleton`` into ``--models``, once).
Per model and batch size, the project's accuracy figures (``grid_search.real.accuracy``).

    python grid_search/results/zoo_more_2gpu/compare.py [--profile P] [--models DIR] [--rows]

Every re-simulated row's program is checked against the fingerprint recorded when it was
measured (``study compare`` refuses another program); ``../zoo_2gpu/``'s LLaMA rows were
measured before rows recorded fingerprints, and the skeleton of this folder's export (same
torch, same ``transformers``) reproduces the predictions they recorded exactly.
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

TOKENS = ["--dim", "seq=512"]
MSE = ["--train", "--loss", "mse", "--optimizer", "adam"]
CE = ["--train", "--loss", "cross_entropy", "--optimizer", "adam"]
STUDIES = [  # (model, status, model file, options, CSVs): "held out" when measured sealed,
    # "development" once a change to the cost model or backend was made from its rows
    # (T5 and LLaMA: the layouts from 256 rows; EfficientNet: the grouped convolutions)
    ("T5 encoder 12 x 768 (torchscript)", "measured sealed, development since", "t5", TOKENS + MSE,
     ["call_b/sealed/t5_b8_graph.csv", "call_a/sealed/t5_b16_graph.csv"]),
    ("torchvision ViT-B/16 (torchscript)", "held out", "tvit", CE,
     ["call_b/sealed/tvit_b32_graph.csv", "call_a/sealed/tvit_b64_graph.csv"]),
    ("nn.TransformerEncoder 12 x 768 (dynamo)", "held out", "encoder", TOKENS + MSE,
     ["call_b/sealed/encoder_b8_graph.csv", "call_a/sealed/encoder_b16_graph.csv"]),
    ("EfficientNet-B0 (torchscript)", "measured sealed, development since", "efficientnet",
     ["--train", "--loss", "cross_entropy", "--optimizer", "sgd"],
     ["call_b/sealed/efficientnet_b64_graph.csv",
      "call_a/sealed/efficientnet_b128_graph.csv"]),
    ("torchvision ViT-B/16, after index_add", "development", "tvit", CE,
     ["call_d/tvit_b32_graph.csv"]),
    ("nn.TransformerEncoder, after index_add", "development", "encoder", TOKENS + MSE,
     ["call_d/encoder_b8_graph.csv"]),
    ("nn.TransformerEncoder, after the unit-axes Transpose", "development", "encoder",
     TOKENS + MSE, ["call_f/encoder_b8_graph.csv"]),
    ("HF GPT-2 12 x 768 (dynamo)", "development", "gpt2_hf", TOKENS + CE,
     ["call_a/hf_gpt2_b8_graph.csv", "call_b/hf_gpt2_b16_graph.csv"]),
    ("HF LLaMA 8 x 1024 (dynamo; ../zoo_2gpu/, sealed there)",
     "measured sealed, development since", "llama", TOKENS + CE,
     ["../zoo_2gpu/call_c/sealed/llama_b8_graph.csv",
      "../zoo_2gpu/call_c/sealed/llama_b16_graph.csv"]),
    ("HF ViT 12 x 768 (torchscript)", "development", "vit", MSE,
     ["call_a/vit_b32_graph.csv", "call_b/vit_b64_graph.csv"]),
]


def _ok(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8") as f:
        return [r for r in csv.DictReader(f) if r.get("measured_status") == "ok"
                and (r.get("latency_s") or "").strip()]


def _line(label: str, rows: list[dict[str, str]]) -> str:
    from grid_search.real import accuracy

    a = accuracy(rows)
    return (f"| {label} | {int(a['n'])} | {a['spearman']:.3f} | {a['kendall']:.3f} | "
            f"{a['median_latency_error'] * 100:.1f}% / {a['p90_latency_error'] * 100:.1f}% / "
            f"{a['worst_latency_error'] * 100:.1f}% | "
            f"{a['median_signed_latency_error'] * 100:+.1f}% | {a['top1_regret'] * 100:.1f}% | "
            f"{a['median_memory_error'] * 100:.1f}% / {a['worst_memory_error'] * 100:.1f}% |")


def _model(models: Path, name: str) -> Path:
    path = models / f"{name}.onnx"
    if not path.exists():
        models.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "grid_search.skeleton", "fill",
                        str(next(HERE.glob(f"call_a/skel/{name}.skel.onnx*"))), str(path)],
                       check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return path


def _simulated(csv_path: Path, model: Path, opts: list[str], profile: str,
               out: Path, stages: str | None = None) -> list[dict[str, str]]:
    """The rows of ``csv_path`` simulated again on ``profile``; ``stages``: the profile
    that weighed the pipeline stages when they were measured (default ``profile``)."""
    batch = _ok(csv_path)[0]["batch_size"]
    subprocess.run([sys.executable, "-m", "grid_search.study", "compare", str(csv_path),
                    "--model", str(model), "--dim", f"batch={batch}", *opts,
                    "--hardware", profile, "--dtype", "Float32", "-o", str(out),
                    *(["--stages-hardware", stages] if stages else [])],
                   check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return _ok(out.with_suffix(".csv"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="h200-sxm-graph")
    ap.add_argument("--models", type=Path, default=Path(tempfile.gettempdir()) / "zoo_more",
                    help="where the filled skeletons go (default: TMPDIR/zoo_more)")
    ap.add_argument("--rows", action="store_true", help="also print every row")
    a = ap.parse_args()
    print("| model, batch, predictions | n | Spearman | Kendall | latency error median / p90 / "
          "worst | median signed | top-1 regret | memory error median / worst |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for label, status, name, opts, files in STUDIES:
            model = _model(a.models, name)
            for f in files:
                recorded = _ok(HERE / f)
                again = _simulated((HERE / f).resolve(), model, opts, a.profile,
                                   Path(tmp) / Path(f).stem)
                b = recorded[0]["batch_size"]
                print(_line(f"{label} ({status}), batch {b}, recorded", recorded))
                print(_line(f"{label} ({status}), batch {b}, {a.profile}", again))
                if a.rows:
                    print_rows(again)


def print_rows(rows: list[dict[str, str]]) -> None:
    """Each row's predicted and measured step, fastest measured first, and its peak memory
    predicted against measured (signed: a negative one is a fit the run could miss)."""
    for r in sorted(rows, key=lambda r: float(r["measured_latency_s"])):
        p, m = float(r["latency_s"]) * 1e3, float(r["measured_latency_s"]) * 1e3
        mem = ""
        if r.get("measured_peak_memory_bytes") and r.get("peak_memory_bytes"):
            pm, mm = float(r["peak_memory_bytes"]), float(r["measured_peak_memory_bytes"])
            mem = f"; memory {pm / 2**30:.2f} / {mm / 2**30:.2f} GiB, {(pm / mm - 1) * 100:+.1f}%"
        print(f"    D{r['dp']} T{r['tp']} P{r['pp']} K{r['microbatches']} "
              f"{r['schedule']:5}: predicted {p:7.2f} ms, measured "
              f"{m:7.2f} ms, {(p / m - 1) * 100:+.1f}%{mem}")


if __name__ == "__main__":
    main()
