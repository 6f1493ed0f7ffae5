"""Predicted vs measured for this folder's sealed studies (README.md), as
``../zoo_more_2gpu/compare.py`` reads its own: the predictions recorded at the measuring
commit, and the rows simulated again by ``study compare`` against ``--profile`` on the
device's own exports (``call_a/skel/``, filled into ``--models`` once), the pipelines'
stages weighed as they were when measured (the profile at the log's commit).

    python grid_search/results/zoo_sealed3/compare.py [--profile P] [--models DIR] [--rows]
"""

from __future__ import annotations

import argparse
import importlib.util
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("zoo_more_compare",
                                               HERE.parent / "zoo_more_2gpu" / "compare.py")
assert _spec is not None and _spec.loader is not None
base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(base)

TOKENS = base.TOKENS + base.MSE
STUDIES = [  # (label, model file, options): every one held out, measured sealed at 2600bce
    ("HF ConvNeXt-T (torchscript)", "convnext", base.CE),
    ("HF MobileNetV2 1.0 (torchscript)", "mobilenet", base.CE),
    ("HF GPT-NeoX, Pythia-160m sizes (dynamo)", "neox", TOKENS),
    ("HF OPT, OPT-125m sizes (torchscript)", "opt", TOKENS),
]


def _model(here: Path, models: Path, name: str) -> Path:
    path = models / f"{name}.onnx"
    if not path.exists():
        models.mkdir(parents=True, exist_ok=True)
        base.subprocess.run([base.sys.executable, "-m", "grid_search.skeleton", "fill",
                             str(next(here.glob(f"call_a/skel/{name}.skel.onnx*"))), str(path)],
                            check=True, cwd=base.ROOT, stdout=base.subprocess.DEVNULL)
    return path


def _stages_profile(here: Path, tmp: str) -> str:
    """The profile that weighed the measured pipelines' stages: ``call_a/run_a.log``'s
    profile as it was at that log's commit (a later refit may split a pipeline otherwise,
    and ``study compare`` refuses a program other than the one measured)."""
    log = (here / "call_a" / "run_a.log").read_text(encoding="utf-8")
    commit = log.split("### project commit ")[1].split()[0]
    name = log.split("### profile ")[1].split()[0]
    path = Path(tmp) / f"{name}-{commit[:7]}.json"
    path.write_bytes(base.subprocess.run(
        ["git", "show", f"{commit}:calibration/profiles/{name}.json"], cwd=base.ROOT,
        check=True, capture_output=True).stdout)
    return str(path)


def main(here: Path = HERE, studies: list[tuple[str, str, list[str]]] = STUDIES) -> None:
    """Compare the sealed studies of folder ``here`` (``call_a/sealed/NAME_b*_graph.csv``,
    the skeletons in ``call_a/skel/``): ``studies`` lists ``(label, NAME, options)``."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="h200-sxm-graph")
    ap.add_argument("--models", type=Path, default=Path(tempfile.gettempdir()) / here.name,
                    help=f"where the filled skeletons go (default: TMPDIR/{here.name})")
    ap.add_argument("--rows", action="store_true", help="also print every row")
    a = ap.parse_args()
    print("| model, batch, predictions | n | Spearman | Kendall | latency error median / p90 / "
          "worst | median signed | top-1 regret | memory error median / worst |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        stages = _stages_profile(here, tmp)
        for label, name, opts in studies:
            model = _model(here, a.models, name)
            for f in sorted((here / "call_a" / "sealed").glob(f"{name}_b*_graph.csv"),
                            key=lambda p: int(p.stem.split("_b")[1].split("_")[0])):
                recorded = base._ok(f)
                again = base._simulated(f, model, opts, a.profile, Path(tmp) / f.stem,
                                        stages)
                b = recorded[0]["batch_size"]
                print(base._line(f"{label}, batch {b}, recorded", recorded))
                print(base._line(f"{label}, batch {b}, {a.profile}", again))
                if a.rows:
                    base.print_rows(again)


if __name__ == "__main__":
    main()
