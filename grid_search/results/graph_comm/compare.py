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
from pathlib import Path

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("channels_last_compare",
                                               HERE.parent / "channels_last" / "compare.py")
assert _spec is not None and _spec.loader is not None
_cl = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_cl)

CE = _cl.sealed3.base.CE
CALLS = {  # call: (folder, its log, [(label, model file, options)]), each held out
    "a": ("call_a", "run_a.log", [("HF FocalNet-T (dynamo)", "focalnet", CE)]),
    "b": ("call_b", "run_b.log", [("HF Swin-T (torchscript)", "swin", CE)]),
    "d": ("call_d", "run_d.log", [("HF Swin-V2-T (torchscript)", "swinv2", CE)]),
    "f": ("call_f", "run_f.log", [("HF PoolFormer-S12 (dynamo)", "poolformer", CE)]),
    "h": ("call_h", "run_h.log", [("HF PoolFormer-M36 (dynamo)", "poolformer_m36", CE)]),
}


if __name__ == "__main__":
    _cl.compare_call(HERE, CALLS, "a")
