"""Whether the fused Adam kernel's time depends on the gradients' magnitude (README.md):
HGNet-V2's randomly initialized layers shrink its activations to 1e-11 at the logits, so
its weight gradients are 1e-16 to 1e-26, and their squares are subnormal floats.

``torch._fused_adam_`` (one tensor per call, as the backend runs it) timed by
``torch.profiler`` inside a replayed CUDA graph of 32 updates of distinct tensors, kernel
by kernel; moments drawn as the runner draws them (``m`` normal, ``v`` squares of
normals, step 1), gradients normal times a scale: 1e-3 (a trained model's), 1e-12,
1e-20 and 1e-22 (squares subnormal), 1e-26 (squares underflow to zero), and zero.
Prints, per size and scale, the median kernel time (us).

    python adam_tiny_grads.py

The timing is ``../adam_step/adam_values.py``'s (``replayed_kernel_us``); call E ran this
script at 765637e, when it held a copy of that loop.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

_spec = importlib.util.spec_from_file_location(
    "adam_values", Path(__file__).resolve().parent.parent / "adam_step" / "adam_values.py")
assert _spec is not None and _spec.loader is not None
adam_values = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(adam_values)


def main() -> None:
    dev = torch.device("cuda")
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("elements  grad scale    kernel us (median)")
    for n in (36864, 82944, 524288, 2097152):
        for scale in (1e-3, 1e-12, 1e-20, 1e-22, 1e-26, 0.0):
            step = torch.ones((), device=dev)
            sets = []
            for _ in range(32):
                w, g, m, v = (torch.randn(n, device=dev) for _ in range(4))
                g.mul_(scale)
                v.mul_(v)
                sets.append((w, g, m, v))

            us = adam_values.replayed_kernel_us(sets, step)
            print(f"{n:9d}  {scale:10.0e}  {us:18.1f}", flush=True)


if __name__ == "__main__":
    main()
