"""Predicted vs measured for this folder's held-out one-GPU steps (README.md).

    python grid_search/results/heldout_1gpu/compare.py WORK [--profile P] [--calls a b]

For each call, it unpacks ``call_X/rows_X.tgz`` and ``call_X/skel_X.tgz`` under WORK,
fills each skeleton into WORK/full/NAME.onnx once (the device's own export, its emptied
weights given seeded values: `python -m grid_search.skeleton`), runs `python -m
grid_search.study compare` on each model's rows (reports in WORK/reports/), and prints
one line per model and batch size, then the error over the models at their smaller and
at their larger batch size, then the out-of-memory checks of calls C and D. With one
configuration per batch size there is no rank to correlate: what this study shows is the
error of one-GPU steps across models.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]

TOK = ["--dim", "seq=512", "--train", "--loss", "mse", "--optimizer", "adam"]
IMG = ["--train", "--loss", "cross_entropy", "--optimizer", "adam"]
AUD = ["--train", "--loss", "mse", "--optimizer", "adam"]

MEMORY = {  # name: call of run_c.sh that ran its out-of-memory check (mem_X.tgz)
    "bloom": "c", "phi": "c", "modernbert": "c", "pvt": "c", "hgnetv2": "c",
    "falcon": "d", "gpt_neo": "d", "ast": "d", "clip_vision": "d", "whisper": "d",
}

MARGIN = {  # name: call of run_g.sh that ran its check 1% from the cap (in rows_X.tgz)
    "stablelm": "g", "gpt_neox": "g", "qwen2": "g", "llama": "h", "olmo": "h", "gptj": "h",
}

MODELS = {  # name: (call, what, options), as run.sh measured them
    "distilbert": ("a", "DistilBERT-base, 6 x 768", TOK),
    "electra": ("a", "ELECTRA-small, 12 x 256", TOK),
    "roformer": ("a", "RoFormer-base, 12 x 768", TOK),
    "mpnet": ("a", "MPNet-base, 12 x 768", TOK),
    "bloom": ("a", "BLOOM 1024 x 12 (ALiBi)", TOK),
    "phi": ("a", "Phi 1024 x 12", TOK),
    "gemma": ("a", "Gemma 1024 x 8 (MQA)", TOK),
    "falcon": ("a", "Falcon 1024 x 12 (MQA)", TOK),
    "gpt_neo": ("a", "GPT-Neo 125M", TOK),
    "modernbert": ("a", "ModernBERT-base, 22 x 768", TOK),
    "swiftformer": ("b", "SwiftFormer-XS", IMG),
    "pvt": ("b", "PVT-v1 tiny", IMG),
    "clip_vision": ("b", "CLIP ViT-B/32 image tower", IMG),
    "textnet": ("b", "TextNet-T", IMG),
    "hgnetv2": ("b", "HGNet-V2 B0", IMG),
    "ast": ("b", "AST, 12 x 768", AUD),
    "whisper": ("b", "Whisper-base encoder, 6 x 512", AUD),
    "stablelm": ("g", "StableLM 1024 x 12", TOK),
    "gpt_neox": ("g", "GPT-NeoX (Pythia-160M)", TOK),
    "qwen2": ("g", "Qwen2 896 x 12 (GQA)", TOK),
    "llama": ("g", "Llama 1024 x 12 (GQA)", TOK),
    "olmo": ("g", "OLMo 1024 x 12", TOK),
    "gptj": ("g", "GPT-J 1024 x 12", TOK),
}


def _unpack(work: Path, calls: list[str]) -> None:
    for c in calls:
        for what in ("rows", "skel"):
            with tarfile.open(HERE / f"call_{c}" / f"{what}_{c}.tgz") as t:
                t.extractall(work / c, filter="data")
        full = work / "full"
        full.mkdir(parents=True, exist_ok=True)
        for skel in sorted((work / c / "skel").glob("*.skel.onnx")):
            out = full / skel.name.replace(".skel.onnx", ".onnx")
            if not out.exists():
                subprocess.run([sys.executable, "-m", "grid_search.skeleton", "fill",
                                str(skel), str(out)], cwd=ROOT, check=True,
                               stdout=subprocess.DEVNULL)


def _compare(work: Path, name: str, rows: Path, profile: str, out: Path) -> list[dict]:
    """`study compare` of ``rows`` (a model's CSV) on the device's own export of ``name``,
    its report written to ``out``; prints its warnings (not the files it wrote) and
    returns its rows by batch size."""
    r = subprocess.run([sys.executable, "-m", "grid_search.study", "compare", str(rows),
                        "--model", str(work / "full" / f"{name}.onnx"), *MODELS[name][2],
                        "--hardware", profile, "-o", str(out)], cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in r.stderr.splitlines():
        if not line.startswith("wrote "):
            print(f"  ({name}) {line}")
    return sorted(csv.DictReader(open(f"{out}.csv")), key=lambda x: int(x["batch_size"]))


def _memory(work: Path, profile: str, checks: dict[str, str], title: str,
            packed: bool) -> None:
    """Out-of-memory checks: each model's batch sizes run under the cap pick_cap.py chose
    (``checks``: name -> call; its rows in ``mem_X.tgz`` where ``packed``, else unpacked
    with the call's rows), against what the simulator (eager profile) predicts there."""
    right = total = fit_oom = 0
    print()
    print(f"{title}, simulated on {profile}:")
    for name, call in checks.items():
        if packed:
            with tarfile.open(HERE / f"call_{call}" / f"mem_{call}.tgz") as t:
                t.extractall(work / call, filter="data")
        for row in _compare(work, name, work / call / "mem" / f"{name}.csv", profile,
                            work / "reports" / f"{name}_memory"):
            ran = row["measured_status"] == "ok"
            fits = row["predicted_fits"] == "true"
            total += 1
            right += ran == fits
            fit_oom += fits and not ran
            cap = float(row["memory_limit_bytes"])
            pred = float(row["peak_memory_bytes"])
            got = (f"peak {float(row['measured_peak_memory_bytes']) / 2**30:.2f} GiB "
                   f"({_pct(pred / float(row['measured_peak_memory_bytes']) - 1)})"
                   if ran else "ran out")
            print(f"  {MODELS[name][1]:34} {row['batch_size']:>5} cap {cap / 2**30:6.2f} GiB, "
                  f"predicted {pred / 2**30:6.2f} GiB ({'fits' if fits else 'out of memory'})"
                  f", {got}")
    print(f"  {right} of {total} right; predicted to fit but ran out: {fit_oom}")


def _pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("work", type=Path)
    ap.add_argument("--profile", default="h200-sxm-graph")
    ap.add_argument("--calls", nargs="+", default=["a", "b"])
    ap.add_argument("--memory-profile", default="h200-sxm",
                    help="the profile the out-of-memory checks were predicted on")
    a = ap.parse_args()
    work = a.work.resolve()
    _unpack(work, a.calls)
    (work / "reports").mkdir(exist_ok=True)
    print(f"one-GPU training steps replayed, measured on 1 x H200, simulated on {a.profile}")
    print(f"{'model':34} {'batch':>5} {'measured ms':>11} {'predicted ms':>12} {'error':>7} "
          f"{'memory':>7}")
    errors: dict[str, list[float]] = {"smaller": [], "larger": []}
    mem: list[float] = []
    for name, (call, what, _) in MODELS.items():
        if call not in a.calls:
            continue
        rows = _compare(work, name, work / call / "rows" / f"{name}.csv", a.profile,
                        work / "reports" / name)
        for i, r in enumerate(rows):
            m, p = float(r["measured_latency_s"]), float(r["latency_s"])
            e = p / m - 1
            em = float(r["peak_memory_bytes"]) / float(r["measured_peak_memory_bytes"]) - 1
            errors["smaller" if i == 0 else "larger"].append(e)
            mem.append(em)
            nan = " (NaN in results)" if r.get("measured_nonfinite") else ""
            print(f"{what:34} {r['batch_size']:>5} {1e3 * m:11.2f} {1e3 * p:12.2f} "
                  f"{_pct(e):>7} {_pct(em):>7}{nan}")
    print()
    print("over the models (|error|: median / p90 / worst; signed median):")
    for k, es in errors.items():
        ab = [abs(e) for e in es]
        print(f"  {k} batch: {len(es)} models, {100 * statistics.median(ab):.1f}% / "
              f"{100 * float(np.percentile(ab, 90)):.1f}% / {100 * max(ab):.1f}%; "
              f"signed {_pct(statistics.median(es))}; within 5%: "
              f"{sum(x <= 0.05 for x in ab)} of {len(ab)}")
    ab = [abs(e) for e in mem]
    print(f"  peak memory against max_memory_allocated: {100 * statistics.median(ab):.1f}% / "
          f"{100 * float(np.percentile(ab, 90)):.1f}% / {100 * max(ab):.1f}%")
    if set(a.calls) >= {"a", "b"}:
        _memory(work, a.memory_profile, MEMORY, "out of memory under a cap (eager, one H200)",
                True)
    if set(a.calls) >= {"g", "h"}:
        _memory(work, a.memory_profile, MARGIN,
                "out of memory 1% from the cap (eager, one H200)", False)


if __name__ == "__main__":
    main()
