"""Predicted vs measured for this folder's sealed studies (README.md): HF SEW-D's and HF
EfficientNet-B0's training steps measured in ``call_b/``, HF wav2vec 2.0's and WavLM's in
``call_h/``, WavLM's again in ``call_i/`` (``sealed.tgz``, each opened only after its
comparison's commit was named),
read as ``../norms_views/compare.py`` reads that folder's.

    python grid_search/results/index_adam/compare.py [--call b|h|i] [--profile P]
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
MSE = _cl.sealed3.base.MSE
CALLS = {  # call: (folder, its log, [(label, model file, options)])
    "b": ("call_b", "run_b.log", [("HF SEW-D (dynamo)", "sewd", MSE),
                                  ("HF EfficientNet-B0 (dynamo)", "efficientnet", CE)]),
    "h": ("call_h", "run_h.log", [("HF wav2vec 2.0 base (dynamo)", "wav2vec2", MSE),
                                  ("HF WavLM base (dynamo)", "wavlm", MSE)]),
    "i": ("call_i", "run_i.log", [("HF WavLM base (dynamo)", "wavlm", MSE)]),
}


if __name__ == "__main__":
    _cl.compare_call(HERE, CALLS, "b")
