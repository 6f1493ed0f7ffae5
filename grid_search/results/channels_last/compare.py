"""Predicted vs measured for this folder's sealed study (README.md), read as
``../zoo_sealed3/compare.py`` reads that folder's: the predictions recorded at the
measuring commit, and the rows simulated again against ``--profile`` on the device's own
exports (``call_c/skel.tgz``, filled into ``--models`` once), the pipelines' stages
weighed by the profile at ``call_c/run_c.log``'s commit.

    python grid_search/results/channels_last/compare.py [--profile P] [--models DIR] [--rows]
"""

from __future__ import annotations

import importlib.util
import shutil
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
STUDIES = [  # (label, model file, options): both held out, measured sealed at f4b3c56
    ("HF CvT-13 (dynamo)", "cvt", IMAGES),
    ("HF MobileViT-XXS (dynamo)", "mobilevit", IMAGES),
]


def _unpacked(tmp: Path) -> Path:
    """This folder's call_c laid out as ``sealed3.main`` reads a folder: ``call_a/sealed/``,
    ``call_a/skel/`` and ``call_a/run_a.log``."""
    here = tmp / HERE.name
    call = here / "call_a"
    (call / "sealed").mkdir(parents=True)
    with tarfile.open(HERE / "call_c" / "sealed.tgz") as t:
        t.extractall(call / "sealed", filter="data")
    with tarfile.open(HERE / "call_c" / "skel.tgz") as t:
        t.extractall(call, filter="data")
    shutil.copy(HERE / "call_c" / "run_c.log", call / "run_a.log")
    return here


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as d:
        sealed3.main(_unpacked(Path(d)), STUDIES)
