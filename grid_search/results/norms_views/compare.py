"""Predicted vs measured for this folder's sealed studies (README.md): HF BiT-R50x1's and
HF LeViT-128S's training steps measured in ``call_a/``, HF DeBERTa-v2's and HF Hiera-B's in
``call_c/`` (DeBERTa's stopped at import), DeBERTa-v2's dynamo export in ``call_d/``
(``sealed.tgz``, each opened only after its comparison's commit was named), read as
``../graph_comm/compare.py`` reads that folder's.

    python grid_search/results/norms_views/compare.py [--call a|c|d] [--profile P]
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
    "a": ("call_a", "run_a.log", [("HF BiT-R50x1 (dynamo)", "bit", CE),
                                  ("HF LeViT-128S (dynamo)", "levit", CE)]),
    "c": ("call_c", "run_c.log", [("HF DeBERTa-v2, v3-base sizes (torchscript)", "deberta",
                                   _cl.sealed3.TOKENS),
                                  ("HF Hiera-B (dynamo)", "hiera", CE)]),
    "d": ("call_d", "run_d.log", [("HF DeBERTa-v2, v3-base sizes (dynamo)", "deberta_dynamo",
                                   _cl.sealed3.TOKENS)]),
}


if __name__ == "__main__":
    _cl.compare_call(HERE, CALLS, "a")
