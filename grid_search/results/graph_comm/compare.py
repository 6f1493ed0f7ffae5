"""Predicted vs measured for this folder's sealed studies (README.md): HF FocalNet-T's
training steps measured in ``call_a/``, HF Swin-T's in ``call_b/``, HF Swin-V2-T's in
``call_d/``, HF PoolFormer-S12's in ``call_f/``, HF PoolFormer-M36's in ``call_h/``
(``sealed.tgz``, each opened only after its comparison's commit was named), read as
``../zoo_sealed3/compare.py`` reads that folder's: the predictions recorded at the
measuring commit, and the rows simulated again against ``--profile`` on the device's own
export (``skel.tgz``, filled into ``--models`` once), the pipelines' stages weighed by the
profile at the call's log's commit.

    python grid_search/results/graph_comm/compare.py [--call a|b|d|f|h] [--profile P]
        [--models DIR] [--rows]
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("zoo_sealed3_compare",
                                               HERE.parent / "zoo_sealed3" / "compare.py")
assert _spec is not None and _spec.loader is not None
sealed3 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sealed3)

CALLS = {  # call: (its log, [(label, model file, options)]), each held out
    "a": ("run_a.log", [("HF FocalNet-T (dynamo)", "focalnet", sealed3.base.CE)]),
    "b": ("run_b.log", [("HF Swin-T (torchscript)", "swin", sealed3.base.CE)]),
    "d": ("run_d.log", [("HF Swin-V2-T (torchscript)", "swinv2", sealed3.base.CE)]),
    "f": ("run_f.log", [("HF PoolFormer-S12 (dynamo)", "poolformer", sealed3.base.CE)]),
    "h": ("run_h.log", [("HF PoolFormer-M36 (dynamo)", "poolformer_m36", sealed3.base.CE)]),
}


def _unpacked(tmp: Path, call: str, log: str) -> Path:
    """``call_X/`` laid out as ``sealed3.main`` reads a folder: ``call_a/sealed/``,
    ``call_a/skel/`` and ``call_a/run_a.log``."""
    here = tmp / HERE.name
    dest = here / "call_a"
    (dest / "sealed").mkdir(parents=True)
    with tarfile.open(HERE / f"call_{call}" / "sealed.tgz") as t:
        t.extractall(dest / "sealed", filter="data")
    with tarfile.open(HERE / f"call_{call}" / "skel.tgz") as t:
        t.extractall(dest, filter="data")
    shutil.copy(HERE / f"call_{call}" / log, dest / "run_a.log")
    return here


if __name__ == "__main__":
    which = "a"
    if "--call" in sys.argv:  # (sealed3.main reads the other options)
        i = sys.argv.index("--call")
        which = sys.argv[i + 1] if i + 1 < len(sys.argv) else ""
        del sys.argv[i:i + 2]
    if which not in CALLS:
        sys.exit(f"--call: choose one of {', '.join(CALLS)}")
    log, studies = CALLS[which]
    with tempfile.TemporaryDirectory() as d:
        sealed3.main(_unpacked(Path(d), which, log), studies)
