"""Predicted vs measured for this folder's sealed study (README.md), read as
``../zoo_sealed3/compare.py`` reads that folder's: the predictions recorded at the
measuring commit, and the rows simulated again against ``--profile`` on the device's own
exports (``call_c/skel.tgz``, filled into ``--models`` once), the pipelines' stages
weighed by the profile at ``call_c/run_c.log``'s commit.

    python grid_search/results/channels_last/compare.py [--call c|f] [--profile P]
        [--models DIR] [--rows]

``--call c`` (the default): CvT-13 and MobileViT-XXS (``call_c/``); ``--call f``:
ConvNeXt-V2 (``call_f/``).
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

IMAGES = sealed3.base.CE
CALLS = {  # call: (folder, its log, [(label, model file, options)]), each held out
    "c": ("call_c", "run_c.log", [("HF CvT-13 (dynamo)", "cvt", IMAGES),  # sealed at f4b3c56
                                  ("HF MobileViT-XXS (dynamo)", "mobilevit", IMAGES)]),
    "f": ("call_f", "run_f.log", [("HF ConvNeXt-V2 atto (dynamo)", "convnextv2", IMAGES)]),
}


def _unpacked(tmp: Path, here: Path, folder: str, log: str) -> Path:
    """A call's folder of ``here`` laid out as ``sealed3.main`` reads one:
    ``call_a/sealed/``, ``call_a/skel/`` and ``call_a/run_a.log``."""
    out = tmp / here.name
    call = out / "call_a"
    (call / "sealed").mkdir(parents=True)
    with tarfile.open(here / folder / "sealed.tgz") as t:
        t.extractall(call / "sealed", filter="data")
    with tarfile.open(here / folder / "skel.tgz") as t:
        t.extractall(call, filter="data")
    shutil.copy(here / folder / log, call / "run_a.log")
    return out


def compare_call(here: Path, calls: dict, default: str) -> None:
    """``--call X`` (default ``default``) of ``calls`` (``{call: (folder, its log,
    [(label, model file, options)])}``) compared by ``sealed3.main``, which reads the
    other options."""
    which = default
    if "--call" in sys.argv:
        i = sys.argv.index("--call")
        which = sys.argv[i + 1] if i + 1 < len(sys.argv) else ""
        del sys.argv[i:i + 2]
    if which not in calls:
        sys.exit(f"--call: choose one of {', '.join(calls)}")
    folder, log, studies = calls[which]
    with tempfile.TemporaryDirectory() as d:
        sealed3.main(_unpacked(Path(d), here, folder, log), studies)


if __name__ == "__main__":
    compare_call(HERE, CALLS, "c")
