"""The grid search through the builder tower (``dtp`` before the passes, ``--transform
tower``) against the search through the spmd passes (``dtp`` now)
(``run_search(..., transform="passes")``, ``distir grid-search --transform passes``): per
configuration, the simulated latency of each and their ratio, and each search's wall time.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_search_passes.py [--workers 1]
        [--skip-zoo] [--max-microbatches 16]

Workloads: the MLP 8 x 2048 (batch 8192) and GPT-2 4 layers d 1024 training (batch 64) on
8 devices; HF GPT-2 and ResNet-18 of the zoo (``tests/zoo``: exported with torch, cached)
made training steps (MSE, SGD) at batch 16 on 4 devices, searched as a user's ONNX file
(their initializers over 64 elements left out, as a full-size model's search leaves its
weights out). The tower's search simulates one replica (one tensor-parallel rank) where the
replicas run alike (``tower.dtp_replica``), as the passes' does (``dtp_replica``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def _label(r: dict[str, Any]) -> str:
    s = f"D{r['dp']}/T{r['tp']}/P{r['pp']}"
    return s + (f"/K{r['microbatches']}" if int(r["pp"]) > 1 else "")


def compare(w: Any, devices: int, batch: int, max_k: int, hardware: str,
            workers: int) -> None:
    from grid_search import enumerate_space, run_search

    schedules = ("1f1b",) if w.training else ("gpipe",)
    cs = list(enumerate_space(w.name, devices, [batch], max_microbatches=max_k,
                              schedules=schedules))
    rows, wall = {}, {}
    for t in ("tower", "passes"):
        t0 = time.perf_counter()
        rows[t] = run_search(w, cs, hardware=hardware, workers=workers, progress=None,
                             transform=t).rows
        wall[t] = time.perf_counter() - t0
    print(f"\n{w.name}, batch {batch}, {devices} devices, {len(cs)} configurations: search "
          f"wall time tower {wall['tower']:.1f} s, passes {wall['passes']:.1f} s")
    print(f"  {'configuration':<16} {'tower ms':>10} {'passes ms':>10} {'ratio':>7}  status")
    ratios = []
    for a, b in zip(rows["tower"], rows["passes"], strict=True):
        la, lb = a["latency_s"], b["latency_s"]
        both = a["status"] == b["status"] == "ok"
        ratio = lb / la if both else None
        if ratio is not None:
            ratios.append(ratio)
        why = "" if a["status"] == b["status"] == "ok" else \
            f"  tower: {a['status']} {a['reason'][:60]} | passes: {b['status']} {b['reason'][:60]}"
        print(f"  {_label(a):<16} {la * 1e3 if la else float('nan'):>10.3f} "
              f"{lb * 1e3 if lb else float('nan'):>10.3f} "
              f"{ratio if ratio is not None else float('nan'):>7.3f}  {a['status']}/{b['status']}"
              + why)

    def top(rs: list[dict[str, Any]]) -> list[str]:
        return [_label(r) for r in sorted((r for r in rs if r["status"] == "ok"),
                                          key=lambda r: r["latency_s"])[:5]]

    if ratios:
        print(f"  ratio passes/tower: min {min(ratios):.3f}, max {max(ratios):.3f}; "
              f"built: tower {sum(r['status'] == 'ok' for r in rows['tower'])}, passes "
              f"{sum(r['status'] == 'ok' for r in rows['passes'])}")
    print(f"  top 5 tower:  {', '.join(top(rows['tower']))}")
    print(f"  top 5 passes: {', '.join(top(rows['passes']))}")


def zoo(name: str) -> Any:
    """The zoo model ``name`` as a user's ONNX file made a training step, at batch 16."""
    import grid_search.models
    from distir.cli._train import TrainOptions
    from grid_search import workload
    from tests.zoo.export import exported
    from tests.zoo.models import BY_NAME

    grid_search.models.KEEP_ELEMENTS = 64  # leave the weights out, as at full size
    spec = BY_NAME[name]
    path = exported(spec, "torchscript").path
    return workload(path, dims=spec.dims(batch=16), name=f"zoo-{name}",
                    train=TrainOptions("mse", "sgd", 0.1))


def main() -> None:
    from benchmarks._machine import machine_line
    from grid_search import workload

    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--hardware", default="h100-sxm")
    ap.add_argument("--max-microbatches", type=int, default=16)
    ap.add_argument("--skip-zoo", action="store_true")
    args = ap.parse_args()
    print(f"{machine_line()}; {args.workers} worker(s); profile {args.hardware}")
    k = args.max_microbatches
    compare(workload("mlp", num_layers=8, width=2048), 8, 8192, k, args.hardware,
            args.workers)
    compare(workload("gpt2-4-1024-16-train"), 8, 64, k, args.hardware, args.workers)
    if not args.skip_zoo:
        for name in ("gpt2", "resnet18"):
            compare(zoo(name), 4, 16, k, args.hardware, args.workers)


if __name__ == "__main__":
    main()
