"""Predicted vs measured training-step times: the rows ``benchmarks/bench_grad.py --json``
wrote on a GPU, each step rebuilt here exactly as it was run (same builders, options and
batch size) and simulated on a profile; prints a markdown table per model, with the
median and worst absolute error.

    python grid_search/results/h100x1/train_steps_table.py gpt2.json resnet50.json \
        [--hardware h100-sxm]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any


def rebuild(row: dict[str, Any], args: dict[str, Any]) -> Any:
    """The step program of a bench_grad row."""
    from distir.transforms import training_step

    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
    from bench_grad import resnet50_forward

    if row["model"] == "gpt2":
        from distir.models.gpt2 import GPT2Config

        cfg = GPT2Config(n_layer=args["layers"], d_model=args["d_model"],
                         n_head=args["heads"], vocab_size=args["vocab"],
                         seq_len=args["seq"], batch_size=row["batch"])
        ck = row["variant"].split("=")[1]
        return training_step(cfg.build(), loss="cross_entropy", optimizer="adam", lr=1e-4,
                             wrt=list(cfg.weight_shapes()), checkpoint=ck)
    fwd, wrt = resnet50_forward(row["batch"], args["image"])
    return training_step(fwd, loss="cross_entropy", optimizer="adam", lr=1e-4, wrt=wrt,
                         batchnorm="train")


def table(path: str, hardware: str) -> str:
    import distir

    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    args = doc["args"]
    lines = [f"{doc['device']}, torch {doc['torch']}; profile `{hardware}`", "",
             "| model | variant | batch | measured ms | predicted ms | error | peak GiB "
             "measured | predicted |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    errs = []
    for row in doc["rows"]:
        if row["variant"] == "eager":
            lines.append(f"| {row['model']} | eager (reference) | {row['batch']} | "
                         f"{row['measured_s'] * 1e3:.1f} | | | "
                         f"{row['peak_bytes'] / 2**30:.1f} | |")
            continue
        sim = distir.simulate(rebuild(row, args), hardware=hardware)
        err = (sim.latency_s - row["measured_s"]) / row["measured_s"]
        errs.append(abs(err))
        lines.append(f"| {row['model']} | {row['variant']} | {row['batch']} | "
                     f"{row['measured_s'] * 1e3:.1f} | {sim.latency_s * 1e3:.1f} | "
                     f"{100 * err:+.1f}% | {row['peak_bytes'] / 2**30:.1f} | "
                     f"{max(sim.peak_memory_bytes.values()) / 2**30:.1f} |")
    if errs:
        lines += ["", f"Absolute error: median {100 * statistics.median(errs):.1f}%, worst "
                      f"{100 * max(errs):.1f}% over {len(errs)} steps."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", nargs="+")
    ap.add_argument("--hardware", default="h100-sxm")
    a = ap.parse_args()
    for p in a.json:
        print(table(p, a.hardware))


if __name__ == "__main__":
    main()
