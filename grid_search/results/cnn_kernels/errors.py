"""This folder's figures, for any profiles given (names or .json paths):

    git show 2600bce:calibration/profiles/h200-sxm-graph.json > /tmp/before.json
    python grid_search/results/cnn_kernels/errors.py /tmp/before.json h200-sxm-graph

1. Per family and dtype, the error of each profile on the held-out rows (``split`` test)
   of this folder's measurements (``run_a``, ``run_b``, ``run_c``): a family a profile
   does not fit is priced as its cost rule falls back (``where`` and ``pad`` by the
   ``elementwise`` fit, a grouped convolution by its own family only).
2. The one-GPU and worst steps of ConvNeXt-T, MobileNetV2 (``../zoo_sealed3/call_b/``) and
   RegNet (``../zoo_sealed4/call_b/``), simulated on each profile against their replayed
   traces (``distir explain``).
"""

from __future__ import annotations

import csv
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))

FILES = ("h200-sxm-graph-cnn-Float32", "h200-sxm-graph-cnn-BFloat16", "h200-sxm-graph-ln-Float32",
         "h200-sxm-graph-ln-BFloat16", "h200-sxm-graph-grouped-s1", "h200-sxm-graph-grouped-s2")
TRACES = (("../zoo_sealed3/call_b/traces.tgz",
           ("convnext_1", "convnext_t2", "mobilenet_1", "mobilenet_p2k2")),
          ("../zoo_sealed4/call_b/traces.tgz", ("regnet_1_b64", "regnet_1_b128")))


def _rows() -> list[dict]:
    out = []
    for name in FILES:
        with open(HERE / f"{name}.measurements.csv", encoding="utf-8") as f:
            for r in csv.DictReader(line for line in f if not line.startswith("#")):
                if r["split"] != "test":
                    continue
                for k in ("m", "n", "k", "group_size"):
                    r[k] = int(r[k])
                r["bytes"], r["seconds"] = float(r["bytes"]), float(r["seconds"])
                out.append(r)
    return out


def _predict(hw, r: dict) -> float | None:
    from calibration.fit import _predict as fitted
    from calibration.fit import fit_key

    f = hw.fit(r["family"], fit_key(r)) or hw._kernel_fit(r["family"], r["dtype"])
    if f is None and r["family"] in ("where", "pad"):
        return hw.memory_time(r["bytes"], 0.0, r["dtype"])
    return None if f is None else max(fitted(f, r), hw.launch_overhead)


def errors(profiles: list[str]) -> None:
    from distir.analysis.hardware import load_hardware

    rows = _rows()
    hws = {p: load_hardware(p) for p in profiles}
    print("| family | dtype | held out | " + " | ".join(
        f"{Path(p).name}: median / p90 / signed" for p in profiles) + " |")
    print("|---|---|---|" + "---|" * len(profiles))
    keys = sorted({(r["family"], r["dtype"]) for r in rows})
    for fam, dt in keys:
        sel = [r for r in rows if (r["family"], r["dtype"]) == (fam, dt)]
        cells = []
        for p in profiles:
            e = [x / r["seconds"] - 1 for r in sel if (x := _predict(hws[p], r)) is not None]
            if not e:
                cells.append("n/a")
                continue
            a = sorted(abs(v) for v in e)
            cells.append(f"{100 * statistics.median(a):.1f}% / {100 * a[int(0.9 * len(a))]:.1f}%"
                         f" / {100 * statistics.median(e):+.1f}%")
        print(f"| {fam} | {dt} | {len(sel)} | " + " | ".join(cells) + " |")


def explains(profiles: list[str]) -> None:
    print("\n| step (trace) | measured | " + " | ".join(Path(p).name for p in profiles) + " |")
    print("|---|---|" + "---|" * len(profiles))
    with tempfile.TemporaryDirectory() as tmp:
        for archive, steps in TRACES:
            with tarfile.open(HERE / archive) as t:
                t.extractall(tmp, filter="data")
            for step in steps:
                d = Path(tmp) / step
                cells, measured = [], ""
                for p in profiles:
                    out = subprocess.run(
                        [sys.executable, "-m", "distir", "explain", "--program",
                         str(d / "program.dir"), "--hardware", p, "--replay",
                         str(d / "prof_replay"), str(d / "prof")],
                        cwd=ROOT, capture_output=True, text=True).stdout
                    line = next((x for x in out.splitlines() if x.startswith("step:")), "")
                    parts = line.replace(",", "").split()
                    if len(parts) < 7:
                        cells.append("failed")
                        continue
                    measured = parts[5]
                    cells.append(f"{parts[2]} ms ({parts[-1]})")
                print(f"| {step} | {measured} ms | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    errors(sys.argv[1:])
    explains(sys.argv[1:])
