"""Calibration: microbenchmarks on the local devices, fitted cost models, hardware profiles.

``python -m calibration`` (or ``distir calibrate``) times matrix products and elementwise
kernels on one device and collectives across the local GPUs (NCCL, one process per GPU;
gloo processes on a CPU), fits regressions per op family with scikit-learn, and writes a
hardware profile (the format of ``distir.analysis.hardware``) with the raw measurements
beside it. Shipped profiles live in ``calibration/profiles``; ``calibration/README.md``
documents the format and how each profile was produced.

The modules import torch and scikit-learn only inside the functions that need them, and
never distir's parser: the calibration runs where lark is not installed.
"""

from __future__ import annotations

__all__ = ["calibrate"]


def calibrate(*args: object, **kwargs: object) -> object:
    """See ``calibration.calibrate.calibrate``."""
    from calibration.calibrate import calibrate as run

    return run(*args, **kwargs)  # type: ignore[arg-type]
