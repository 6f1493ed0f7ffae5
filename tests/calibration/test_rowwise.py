"""The rows' shape in calibration: the features of layer-norm, reduction, copy and pad
rows (``calibration.fit``), the microbenchmarks that measure them (``bench_train``,
``bench_nn``), and a fit that learns a kernel slower per byte over narrow rows."""

from __future__ import annotations

from calibration.bench import Timer
from calibration.bench_nn import copy_axes
from calibration.bench_train import DeviceTimer, _case
from calibration.fit import _x, fit_one
from distir.ir import DType


def _row(family: str, op: str, n: int, width: int, nbytes: float, secs: float = 1e-5,
         split: str = "train") -> dict:
    return {"family": family, "op": op, "dtype": "Float32", "m": n, "n": width, "k": 0,
            "bytes": nbytes, "flops": float(n), "group_size": 1, "seconds": secs,
            "split": split}


def test_copy_rows_name_their_axes() -> None:
    assert copy_axes("copy_0213", 1 << 20, 64) == (64, 64)
    assert copy_axes("copy_0231", 1 << 20, 64) == ((1 << 20) // (16 * 64), 64)
    assert copy_axes("copy_0231 s56", 1 << 20, 96) == (96, 56)   # [N, C, S, S] -> NHWC
    assert copy_axes("copy_0312 s56", 1 << 20, 96) == (56, 96)   # and back


def test_row_features() -> None:
    assert _x(_row("reduce", "ReduceSum i196", 1 << 20, 384, 4e6)) == \
        {"bytes": 4e6, "width": 384.0, "inner": 196.0, "rows": 4e6 / (384 * 196),
         "run": 384.0}
    assert _x(_row("reduce", "ReduceSum", 1 << 20, 768, 4e6))["inner"] == 1.0
    per_head = _x(_row("reduce", "ReduceSum run64 mid197", 1 << 20, 768, 4e6))
    assert (per_head["width"], per_head["inner"], per_head["run"]) == (768.0, 1.0, 64.0)
    assert _x(_row("layernorm", "layer_norm", 1 << 20, 96, 8e6))["width"] == 96.0
    assert _x(_row("copy", "copy_0312 s14", 1 << 20, 384, 8e6)) == \
        {"bytes": 8e6, "width": 14.0, "inner": 384.0, "rows": 8e6 / (14 * 384), "run": 14.0}
    assert _x(_row("pad", "Pad c96", 1 << 20, 56, 8e6))["width"] == 56.0
    assert _x(_row("where", "Where", 1 << 20, 1, 9e6)) == {"bytes": 9e6}
    # a concatenation: 20 rows of [1 + 199, 197] (float32: 2 x 20 x 200 x 197 x 4 bytes)
    cat = _x(_row("concat", "Concat p2 i197 a0 s1", 1 << 20, 200, 2.0 * 20 * 200 * 197 * 4))
    assert cat == {"bytes": 2.0 * 20 * 200 * 197 * 4, "rows": 20.0, "width": 200.0,
                   "inner": 197.0, "parts": 2.0, "aligned": 1.0, "contiguous": 1.0,
                   "rank": 3.0}
    assert _x(_row("concat", "Concat p2 i1 a1 r4", 1 << 20, 128, 8e6))["rank"] == 4.0
    assert _x(_row("concat", "Concat p3 i64 a1", 1 << 20, 768, 8e6))["contiguous"] == 2.0
    assert _x(_row("elementwise_bcast", "where_mask", 1 << 20, 4, 9e6)) == \
        {"bytes": 9e6, "where": 2.0}
    assert _x(_row("elementwise_bcast", "bias", 1 << 20, 4, 9e6))["where"] == 1.0


def test_benchmarked_programs() -> None:
    """A bias gradient over pixels reduces [N, C, pixels] over axes 0 and 2; a ReLU6's
    gradient is a Where of a mask and a zero; a pad adds one pixel around each image."""
    fn, _ = _case("reduce", (96, 3136), 1 << 22, DType.Float32)
    assert fn.params[0].type.shape == ((1 << 22) // (96 * 3136), 96, 3136)
    assert _case("reduce", (96, 3136), 1 << 10, DType.Float32) is None  # smaller than one
    fn, _ = _case("reduce", (12, 197, 64), 1 << 22, DType.Float32)  # a per-head bias's
    assert fn.params[0].type.shape == ((1 << 22) // (12 * 197 * 64), 12, 197, 64)
    assert fn.ops[0].attrs["value"].array.tolist() == [0, 2]
    fn, _ = _case("concat", ((1, 199), 197, 1), 1 << 20, DType.Float32)  # a row prepended
    rows = (1 << 20) // (200 * 197)
    assert [p.type.shape for p in fn.params] == [(rows, 1, 197), (rows, 199, 197)]
    assert fn.ops[-1].op_type == "Concat" and fn.ops[-1].attrs["axis"] == 1
    fn, _ = _case("concat", ((1, 199), 197, 0, 4), 1 << 20, DType.Float32)  # rank 4
    assert fn.params[1].type.shape == (rows // 8, 8, 199, 197) and fn.ops[-1].attrs["axis"] == 2
    fn, _ = _case("where", 1, 4096, DType.BFloat16)
    assert [p.type.dtype for p in fn.params] == [DType.Bool, DType.BFloat16]
    assert fn.ops[-1].op_type == "Where"
    fn, _ = _case("pad", (16, 8), 4096, DType.Float32)
    assert fn.params[0].type.shape == (4, 16, 8, 8) and fn.ops[-1].op_type == "Pad"


def test_cold_timer_falls_back_to_back_to_back_on_a_cpu() -> None:
    import torch

    t = DeviceTimer(Timer(torch.device("cpu"), target_s=1e-3, trials=1, max_reps=3))
    secs, reps = t.cold(lambda: torch.ones(8).sum())
    assert secs > 0 and reps >= 2


def test_after_writer_timer_falls_back_to_back_to_back_on_a_cpu() -> None:
    import torch

    from calibration.bench_train import AFTER_WRITER

    assert "reduce" in AFTER_WRITER
    t = DeviceTimer(Timer(torch.device("cpu"), target_s=1e-3, trials=1, max_reps=3))
    x = torch.ones(64, 8)
    secs, reps = t.after_writer(lambda: x.sum(0), x)
    assert secs > 0 and reps >= 2


def test_narrow_rows_are_learned() -> None:
    """A layer norm 4x slower per byte over 96 channels than over 768 (as measured on an
    H200): the fit chosen sees the width, and prices held-out sizes of both within 10%."""
    def law(nbytes: float, width: int) -> float:
        return 3e-6 + nbytes / (1e12 if width >= 768 else 2.5e11)

    rows = []
    for k in range(14, 28):
        for size, split in ((1 << k, "train"), (3 << (k - 1), "test")):
            for width in (96, 192, 384, 768, 2048):
                nbytes = 8.0 * size
                rows.append(_row("layernorm", "layer_norm", size, width, nbytes,
                                 law(nbytes, width), split))
    rep = fit_one("layernorm", "Float32", rows)
    assert rep is not None and "width" in rep.model_name
    assert rep.median_ape is not None and rep.median_ape < 0.1
