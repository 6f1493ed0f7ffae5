"""The backend's half-precision cross entropy against the float32-copy form it replaced.

Times the loss and its gradient over GPT-2's vocabulary on one GPU, as the backend runs
them (``distir.backend`` lowering of ``SoftmaxCrossEntropyLoss`` and its gradient), beside
the earlier form that cast the logits to float32 first, and prints each one's time and the
peak memory it allocates beyond its inputs and result::

    python benchmarks/bench_cross_entropy.py [--rows 8192 32768] [--classes 50257]

Needs CUDA; prints a line and exits otherwise.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[8192, 32768])
    ap.add_argument("--classes", type=int, default=50257)
    ap.add_argument("--dtype", default="Float16", choices=["Float16", "BFloat16"])
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("bench_cross_entropy: no CUDA device; nothing measured")
        return 0
    from distir.backend.lowering import load_lowerings
    from distir.ir.types import DType

    load_lowerings()
    dt = DType[args.dtype]
    tdt = {"Float16": torch.float16, "BFloat16": torch.bfloat16}[args.dtype]
    print(f"device: {torch.cuda.get_device_name()}; {args.dtype}; classes {args.classes}")
    print(f"{'rows':>6} {'kernel':<22} {'loss ms':>8} {'grad ms':>8} "
          f"{'loss extra GiB':>15} {'grad extra GiB':>15}")
    for rows in args.rows:
        _bench(rows, args.classes, dt, tdt, args.repeats)
    return 0


def _bench(rows: int, classes: int, dt: object, tdt: object, repeats: int) -> None:
    """One row count: the old and the new kernels, timed and their peak memory."""
    import torch
    import torch.nn.functional as F

    from distir.backend.lowering import LOWERINGS, Static
    from distir.ir.types import DType, TensorType

    x = (torch.randn(rows, classes, device="cuda") * 2).to(tdt)
    lab = torch.randint(0, classes, (rows,), device="cuda")
    ins = (TensorType(dt, (rows, classes), 0), TensorType(DType.Int64, (rows,), 0))

    def lowered(op: str) -> object:
        out = TensorType(dt, (rows, classes) if "Grad" in op else (), 0)
        s = Static(op, {"reduction": "mean"}, ins, (out,), (None, None), (True,),
                   (False, False), torch.device("cuda"), 0, None)
        return LOWERINGS.rules[op].compile(s)

    def old_loss(x: torch.Tensor, lab: torch.Tensor) -> tuple:
        return ((F.cross_entropy(x.float(), lab, reduction="sum") / rows).to(tdt),)

    def old_grad(x: torch.Tensor, lab: torch.Tensor) -> tuple:
        g = torch.softmax(x.float(), dim=-1)
        g = g.scatter_add(-1, lab.unsqueeze(-1), torch.full((rows, 1), -1.0,
                                                           device="cuda"))
        return ((g / rows).to(tdt),)

    for name, loss, grad in (("float32 copies (old)", old_loss, old_grad),
                             ("half, in place (new)", lowered("SoftmaxCrossEntropyLoss"),
                              lowered("SoftmaxCrossEntropyLossGrad"))):
        figs = []
        for k in (loss, grad):
            for _ in range(3):
                k(x, lab)
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            ts = []
            for _ in range(repeats):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(
                    enable_timing=True)
                a.record()
                out = k(x, lab)
                b.record()
                torch.cuda.synchronize()
                ts.append(a.elapsed_time(b))
                del out
            extra = (torch.cuda.max_memory_allocated() - base) / 2**30
            figs.append((float(np.median(ts)), extra))
        print(f"{rows:>6} {name:<22} {figs[0][0]:8.3f} {figs[1][0]:8.3f} "
              f"{figs[0][1]:15.3f} {figs[1][1]:15.3f}")
    del x


if __name__ == "__main__":
    sys.exit(main())
