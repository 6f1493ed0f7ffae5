"""How the simulator prices a 1-D convolution of a transposed ``[N, L, C]`` token tensor,
against measurements of exactly that (``call_a/cal/``, ``call_b/cal/``: the families
``conv1d_nwc``, ``_dgrad``, ``_wgrad``, measured at cb6716b and 2f5406c with ``x`` and
``dy`` handed over transposed): PyTorch copies both to contiguous tensors first
(``at::_convolution``, ``convolution_backward``), so the price is the ``conv1d`` fit of
the role plus the copies (``cost.train.input_copies_time``). Per family, the median /
90th percentile / worst error and the median signed one, over every row and over the
kernel-1 rows; beside them, the same for the contiguous ``conv1d`` rows held out of the
fit (``split`` = test) of ``call_a``.

    python grid_search/results/conv1d_tokens/check_nwc.py [--profile h200-sxm-graph]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from calibration.calibrate import read_measurements
from distir.analysis.cost.train import conv_fit_time, input_copies_time
from distir.analysis.hardware import load_hardware
from distir.analysis.layout import COPIED_INPUTS
from distir.ir import DType
from distir.ir.types import TensorType

HERE = Path(__file__).resolve().parent


def _geometry(op: str) -> tuple[int, int, int, int, int, int]:
    """``(N, C per group, window, stride, groups, output length)`` from a row's label
    (``conv k{window} s{stride} n{N} c{C/g} p{output length}[ g{groups}]``)."""
    f = {t[0]: int(t[1:]) for t in op.split()[1:]}
    return f["n"], f["c"], f["k"], f["s"], f.get("g", 1), f["p"]


def _role(family: str) -> str:
    """``conv``, ``conv_dgrad`` or ``conv_wgrad`` of a ``conv1d...`` row."""
    return "conv" + family[-6:] if family.endswith(("_dgrad", "_wgrad")) else "conv"


def price(hw, row: dict, copies: bool) -> float:  # noqa: ANN001 - a profile
    """The simulator's time for a row: the ``conv1d`` fit of its role, plus PyTorch's
    copies of ``x`` (and a gradient's ``dy``) where they are transposed."""
    n, cg, k, _, g, out = _geometry(row["op"])
    m, c = int(row["n"]), cg * g
    length = (int(row["bytes"]) // 4 - m * cg * k - n * m * out) // (n * c)  # x's length
    f32 = DType.Float32
    x = TensorType(f32, (n, c, length), (0,))
    w = TensorType(f32, (m, cg, k), (0,))
    y = TensorType(f32, (n, m, out), (0,))
    role = _role(row["family"])
    t = conv_fit_time(hw, role, x, w, y, {"group": g})
    assert t is not None, f"{hw.name} has no conv1d fits"
    if copies:
        moved = ((0, 1),) if role == "conv" else ((0, 1), (2, 1))
        t += input_copies_time(hw, (x, w, y), {COPIED_INPUTS: moved})
    return t


def _summary(errs: list[float]) -> str:
    if not errs:
        return "n/a"
    a = sorted(abs(e) for e in errs)
    p90 = a[min(len(a) - 1, int(0.9 * len(a)))]
    return (f"{len(a):4d} rows: median {100 * statistics.median(a):5.1f}%, p90 "
            f"{100 * p90:5.1f}%, worst {100 * a[-1]:6.1f}%, median signed "
            f"{100 * statistics.median(errs):+6.1f}%")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="h200-sxm-graph")
    hw = load_hardware(ap.parse_args().profile)
    nwc = [r for p in sorted(HERE.glob("call_*/cal/*-nwc*.measurements.csv"))
           for r in read_measurements(p)[0]]
    ncw = [r for r in read_measurements(
        HERE / "call_a/cal/h200-sxm-graph-conv1d.measurements.csv")[0]
           if r["split"] == "test"]
    print(f"# {len(nwc)} transposed-input rows, {len(ncw)} held-out contiguous rows, "
          f"profile {hw.name}")
    for role in ("conv", "conv_dgrad", "conv_wgrad"):
        for label, rows, copies in (("transposed, priced with copies", nwc, True),
                                    ("transposed, priced without", nwc, False),
                                    ("contiguous, held out", ncw, False)):
            mine = [r for r in rows if _role(r["family"]) == role]
            errs = [price(hw, r, copies) / float(r["seconds"]) - 1 for r in mine]
            k1 = [e for e, r in zip(errs, mine, strict=True) if " k1 " in r["op"]]
            print(f"{role:10s} {label:31s} all {_summary(errs)}")
            print(f"{'':10s} {'':31s} k=1 {_summary(k1)}")


if __name__ == "__main__":
    main()
