"""Predicted vs measured for this folder's sealed studies (README.md): HF ConvBERT-base's
training steps measured in ``call_a/``, HF wav2vec 2.0-Conformer's in ``call_b/``
(``sealed.tgz``), read as
``../norms_views/compare.py`` reads that folder's.

    python grid_search/results/conv1d_tokens/compare.py [--call a|b] [--profile P]
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

TEXT = _cl.sealed3.base.TOKENS + _cl.sealed3.base.MSE
CALLS = {  # call: (folder, its log, [(label, model file, options)])
    "a": ("call_a", "run_a.log", [("HF ConvBERT-base (dynamo)", "convbert", TEXT)]),
    "b": ("call_b", "run_b.log", [("HF wav2vec 2.0-Conformer (dynamo)", "conformer",
                                   _cl.sealed3.base.MSE)]),
}

if __name__ == "__main__":
    _cl.compare_call(HERE, CALLS, "a")
