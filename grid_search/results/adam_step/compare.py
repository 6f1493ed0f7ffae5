"""Predicted vs measured for this folder's sealed study (README.md): HF ALBERT-base's, HF
DINOv2's and HF MobileBERT's training steps measured in ``call_b/``, MobileBERT's again
on its own weights in ``call_d/``, HF wav2vec 2.0's in ``call_e/``, HF SqueezeBERT's in
``call_f/`` (``sealed.tgz``), read as ``../norms_views/compare.py`` reads that folder's.

    python grid_search/results/adam_step/compare.py [--call b|d|e|f] [--profile P]
        [--models DIR] [--rows]
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("channels_last_compare",
                                               HERE.parent / "channels_last" / "compare.py")
assert _spec is not None and _spec.loader is not None
_cl = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_cl)

CE = _cl.sealed3.base.CE
TEXT = _cl.sealed3.base.TOKENS + _cl.sealed3.base.MSE
CALLS = {  # call: (folder, its log, [(label, model file, options)])
    "b": ("call_b", "run_b.log", [("HF ALBERT-base (dynamo)", "albert", TEXT),
                                  ("HF DINOv2 ViT-B/14 (dynamo)", "dinov2", CE),
                                  ("HF MobileBERT (dynamo)", "mobilebert", TEXT)]),
    "d": ("call_d", "run_d.log", [("HF MobileBERT (dynamo)", "mobilebert", TEXT)]),
    "e": ("call_e", "run_e.log", [("HF wav2vec 2.0 base (dynamo)", "wav2vec2",
                                   _cl.sealed3.base.MSE)]),
    "f": ("call_f", "run_f.log", [("HF SqueezeBERT (dynamo)", "squeezebert", TEXT)]),
}


def _unpacked(tmp: Path, here: Path, folder: str, log: str) -> Path:
    """As ``channels_last/compare.py`` lays a call out, the searches' CSVs named as
    ``sealed3.main`` finds them (``run_b.sh`` wrote ``NAME_bN.csv``: ``NAME_bN_graph.csv``)."""
    out = _unpacked_as_written(tmp, here, folder, log)
    for f in (out / "call_a" / "sealed").glob("*_b*.csv"):
        if not f.stem.endswith("_graph"):
            f.rename(f.with_name(f"{f.stem}_graph.csv"))
    return out


_unpacked_as_written = _cl._unpacked
_cl._unpacked = _unpacked

if __name__ == "__main__":
    _cl.compare_call(HERE, CALLS, "b")
