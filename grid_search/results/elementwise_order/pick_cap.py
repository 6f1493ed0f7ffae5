"""A memory cap for an out-of-memory check of a model file on one GPU: the predicted peak
of its one-GPU step (D1, as ``study measure --memory-check`` predicts it) at each of
``--batch-sizes``, and the cap halfway (geometrically) between the two middle ones, so
that about half the batch sizes are predicted to fit under it; with ``--above B``, the cap
``--headroom`` (1% by default) above the predicted peak of batch size B, for a check at the
margin (B is predicted to fit by that much). Prints the cap in bytes (the predictions on
standard error).

    python pick_cap.py --model M.onnx [--dim seq=512] --train --loss mse --optimizer adam \\
        --batch-sizes 8 16 24 32 [--hardware h200-sxm] [--above 16 [--headroom 0.01]]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from distir.analysis.hardware import load_hardware  # noqa: E402
from distir.cli import _train  # noqa: E402
from grid_search import study  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--dim", action="append", default=[])
    p.add_argument("--batch-input", default=None)
    p.add_argument("--batch-sizes", type=int, nargs="+", required=True)
    p.add_argument("--hardware", default="h200-sxm")
    p.add_argument("--above", type=int, default=None,
                   help="put the cap --headroom above this batch size's predicted peak")
    p.add_argument("--headroom", type=float, default=0.01)
    _train.add_arguments(p)
    args = p.parse_args()
    w = study._file_workload(args, sorted(args.batch_sizes))
    hw = load_hardware(args.hardware)
    configs = study._configs(w, sorted(args.batch_sizes), 1, 1, "1f1b")
    peaks = study.memory_check_configs(w, configs, hw, 1 << 40, 1.0, len(configs))
    got = sorted(peaks.values())
    for c, b in sorted(peaks.items(), key=lambda x: x[1]):
        print(f"batch {c.batch_size} {c}: predicted {b / 2**30:.2f} GiB", file=sys.stderr)
    if args.above is not None:
        at = [b for c, b in peaks.items() if c.batch_size == args.above]
        if not at:
            print(f"batch size {args.above} not simulated: add it to --batch-sizes",
                  file=sys.stderr)
            return 1
        print(int(at[0] * (1 + args.headroom)))
        return 0
    if len(got) < 2:
        print("fewer than two batch sizes simulated", file=sys.stderr)
        return 1
    mid = len(got) // 2
    print(int(math.sqrt(got[mid - 1] * got[mid])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
