"""Matmuls off 8-element alignment use their own fit where a profile has one."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from distir.analysis.hardware import Hardware, load_hardware

PROFILES = Path(__file__).resolve().parents[2] / "calibration" / "profiles"


def test_unaligned_products_use_their_fit_and_aligned_ones_do_not() -> None:
    doc = json.loads((PROFILES / "h200-sxm.json").read_text())
    doc["fits"].pop("matmul_unaligned", None)  # a profile without the family
    base = Hardware.from_json(doc)
    doc2 = copy.deepcopy(doc)
    # Stand in the Float32 matmul model as the Float16 unaligned one: visibly different.
    doc2["fits"]["matmul_unaligned"] = {"Float16": doc["fits"]["matmul"]["Float32"]}
    hw = Hardware.from_json(doc2)
    f32 = base.matmul_time(4096, 50257, 2048, "Float32", 2)
    assert hw.matmul_time(4096, 50257, 2048, "Float16", 2) == f32  # n = 50257: unaligned
    assert hw.matmul_time(4096, 4096, 2047, "Float16", 2) == \
        base.matmul_time(4096, 4096, 2047, "Float32", 2)             # k unaligned
    for shape in ((4096, 50304, 2048), (4097, 4096, 2048)):         # aligned n and k
        assert hw.matmul_time(*shape, "Float16", 2) == base.matmul_time(*shape, "Float16", 2)
    # Without the fit (older profiles), nothing changes.
    assert base.matmul_time(4096, 50257, 2048, "Float16", 2) > 0


def test_profiles_load_with_or_without_the_family() -> None:
    for name in ("h100-sxm", "h200-sxm", "dgx2-v100"):
        hw = load_hardware(name)
        assert hw.matmul_time(1024, 50257, 1024, "Float16", 2) > 0
    # Calibrated on the H200: an LM head over 50257 tokens is slower than over 50304.
    h200 = load_hardware("h200-sxm")
    assert h200.matmul_time(4096, 50257, 2048, "Float16", 2) > \
        2 * h200.matmul_time(4096, 50304, 2048, "Float16", 2)
