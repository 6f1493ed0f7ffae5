"""Predicted vs measured for this folder's sealed study (README.md): HF FocalNet-T's
training steps measured in ``call_a/`` (``sealed.tgz``, opened only after the comparison's
commit was named), read as ``../zoo_sealed3/compare.py`` reads that folder's: the
predictions recorded at the measuring commit, and the rows simulated again against
``--profile`` on the device's own export (``call_a/skel.tgz``, filled into ``--models``
once), the pipelines' stages weighed by the profile at ``call_a/run_a.log``'s commit.

    python grid_search/results/graph_comm/compare.py [--profile P] [--models DIR] [--rows]
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

STUDIES = [("HF FocalNet-T (dynamo)", "focalnet", sealed3.base.CE)]


def _unpacked(tmp: Path) -> Path:
    """``call_a/`` laid out as ``sealed3.main`` reads a folder: ``call_a/sealed/``,
    ``call_a/skel/`` and ``call_a/run_a.log``."""
    here = tmp / HERE.name
    call = here / "call_a"
    (call / "sealed").mkdir(parents=True)
    with tarfile.open(HERE / "call_a" / "sealed.tgz") as t:
        t.extractall(call / "sealed", filter="data")
    with tarfile.open(HERE / "call_a" / "skel.tgz") as t:
        t.extractall(call, filter="data")
    shutil.copy(HERE / "call_a" / "run_a.log", call / "run_a.log")
    return here


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as d:
        sealed3.main(_unpacked(Path(d)), STUDIES)
