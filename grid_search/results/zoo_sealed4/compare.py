"""Predicted vs measured for this folder's sealed studies (README.md), read as
``../zoo_sealed3/compare.py`` reads that folder's: the predictions recorded at the
measuring commit, and the rows simulated again against ``--profile`` on the device's own
exports (``call_a/skel/``, filled into ``--models`` once).

    python grid_search/results/zoo_sealed4/compare.py [--profile P] [--models DIR] [--rows]
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("zoo_sealed3_compare",
                                               HERE.parent / "zoo_sealed3" / "compare.py")
assert _spec is not None and _spec.loader is not None
sealed3 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sealed3)

IMAGES = sealed3.base.CE
STUDIES = [  # (label, model file, options): every one held out, measured sealed at 156c78f
    ("HF SegFormer MiT-b0 (dynamo)", "segformer", IMAGES),
    ("HF RegNet (torchscript)", "regnet", IMAGES),
    ("MobileNetV3-Small 1.0 (dynamo)", "mobilenetv3", IMAGES),
    ("HF Qwen2 12 x 768 (dynamo)", "qwen2", sealed3.TOKENS),
]

if __name__ == "__main__":
    sealed3.main(HERE, STUDIES)
