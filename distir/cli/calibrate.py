"""``distir calibrate``: microbenchmarks on the local devices and a fitted hardware profile.

The work lives in the ``calibration`` package (imported only when the command runs);
``python -m calibration`` takes the same options, for machines without the full distir
install.
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("calibrate", help="measure the local devices and fit a hardware profile",
                       description="Time matrix products, elementwise kernels and (with "
                       "several GPUs, or gloo processes on a CPU) collectives through "
                       "PyTorch, fit a cost model per op family with scikit-learn, and write "
                       "a hardware profile with the raw measurements (CSV) and a fit-quality "
                       "report beside it. Progress goes to standard error.")
    add_arguments(p)
    p.set_defaults(func=run_calibrate)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``distir calibrate`` (shared with ``python -m calibration``)."""
    p.add_argument("-o", "--output", metavar="FILE", default=None,
                   help="the profile to write (default NAME.json in the current folder); "
                   "NAME.measurements.csv and NAME.report.md go beside it")
    p.add_argument("--name", default=None,
                   help="the profile's name (default: the output file's stem, or one derived "
                   "from the device, e.g. h100-sxm)")
    p.add_argument("--quick", action="store_true",
                   help="a small grid (seconds on a CPU), to test the whole path")
    p.add_argument("--base", metavar="H", default=None,
                   help="a profile (name or path) for the figures not measured: FLOP/s of "
                   "other dtypes, links across nodes (default h100-sxm on H100/H200 GPUs)")
    p.add_argument("--devices", type=int, default=None, metavar="N",
                   help="GPUs to use for collectives (default all)")
    p.add_argument("--cpu", action="store_true", help="measure the CPU even if CUDA is present")
    p.add_argument("--cpu-procs", type=int, default=2, metavar="N",
                   help="gloo processes for collectives on a CPU (default 2)")
    p.add_argument("--no-comm", action="store_true", help="skip the collectives")
    p.add_argument("--shapes", type=int, default=None, metavar="N",
                   help="matmul shapes per dtype (default 300 on a GPU, 80 on a CPU, 24 quick)")
    p.add_argument("--seed", type=int, default=0, help="seed of the matmul shape sample")
    p.add_argument("--fit-only", metavar="CSV", nargs="+", default=None,
                   help="refit from measurements CSVs instead of measuring (several: their "
                   "rows pooled, e.g. a full calibration and a later one of some families "
                   "in another dtype; the machine description is the first file's)")
    p.add_argument("--families", metavar="F", nargs="+", default=None,
                   help="measure only these families: collectives (every collective), or "
                   "compute families (as the CSV's family column "
                   "names them: matmul, matmul_unaligned, elementwise, elementwise_bcast, "
                   "bmm, softmax, layernorm, gelu, copy, the training families such as adam, "
                   "layernorm_grad, softmax_grad, cross_entropy_grad, conv, matmul_tn ...); "
                   "add them to a full calibration with --fit-only FULL.csv THIS.csv")
    p.add_argument("--dtypes", metavar="D", nargs="+", default=None,
                   help="measure every compute family in these dtypes (Float32, Float16, "
                   "BFloat16; default on a GPU: products in all three, elementwise in "
                   "Float32 and BFloat16, the normalization kernels in Float32 and Float16, "
                   "the training families and convolutions in Float32)")
    p.add_argument("--device-time", action="store_true",
                   help="time every compute kernel by its device time alone (the GPU held "
                   "while the calls are enqueued), as a step replayed as a CUDA graph runs "
                   "them, and every collective as the replay of a CUDA graph of back-to-back "
                   "calls: a profile to simulate --cuda-graph steps with (name it apart, "
                   "e.g. --name h200-sxm-graph)")
    p.add_argument("--off-grid", action="store_true",
                   help="draw the products' shapes (matmul, matmul_tn, matmul_nt) as any "
                   "multiple of 8 rather than from the grid of powers of two and their "
                   "midpoints: measure with --families, then pool with the full calibration "
                   "by --fit-only FULL.csv THIS.csv")
    p.add_argument("--pointwise-conv1d", action="store_true",
                   help="draw the 1-D convolution families' shapes (conv1d, conv1d_dgrad, "
                   "conv1d_wgrad) "
                   "from kernel-1 projections over tokens only (SqueezeBERT's, ConvBERT's, "
                   "conformers'), where cuDNN's times stray furthest from their FLOPs: "
                   "measure with --families and another --seed, then pool with the full "
                   "calibration by --fit-only FULL.csv THIS.csv")
    p.add_argument("--measure-only", action="store_true",
                   help="write the measurements CSV and stop (fit later with --fit-only, "
                   "e.g. where scikit-learn is missing)")


def run_calibrate(args: argparse.Namespace) -> int:
    from distir.errors import ConfigError

    try:
        from calibration.calibrate import run_from_args
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] in ("calibration", "sklearn", "torch"):
            raise ConfigError(f"distir calibrate needs the {e.name.split('.')[0]} package: "
                              "install distir with its calibration extras (pip install "
                              "torch scikit-learn)") from None
        raise
    import sys

    args.prog = "distir calibrate"
    argv = sys.argv[1:]
    args.argv = argv[argv.index("calibrate") + 1:] if "calibrate" in argv else []
    return run_from_args(args)
