"""``python -m calibration``: the ``distir calibrate`` command without the distir CLI."""

from __future__ import annotations

import argparse
import sys

from distir.cli.calibrate import add_arguments
from distir.errors import DistIRError


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m calibration",
                                description="Measure the local devices and fit a hardware "
                                "profile (the options of distir calibrate).")
    add_arguments(p)
    argv = sys.argv[1:] if argv is None else argv
    args = p.parse_args(argv)
    args.prog, args.argv = "python -m calibration", argv
    from calibration.calibrate import run_from_args

    try:
        return run_from_args(args)
    except DistIRError as e:
        print(str(e), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
