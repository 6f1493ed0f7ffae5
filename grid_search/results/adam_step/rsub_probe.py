"""The backend's two forms of ``1 - s`` (EfficientNet-B0's SiLU gradients, see README.md):
against a 0-d device tensor (the form before d39f072) and as ``torch.rsub`` with the number
passed by value (after), beside ``sigmoid`` of the same tensor, on B0's activation shapes
at batch 32, float32, each timed as a replayed CUDA graph of 20 calls (us per call, median
of 5 replays).

    python rsub_probe.py
"""

from __future__ import annotations

import torch
from tile_probe import timed  # (this folder: the same replayed timing)


def main() -> None:
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("shape                  sigmoid  sub(0-d,s)  rsub(s,1)")
    one = torch.tensor(1.0, device="cuda")
    for shape in ((32, 32, 112, 112), (32, 96, 112, 112), (32, 144, 56, 56),
                  (32, 240, 28, 28), (32, 480, 14, 14), (32, 1152, 7, 7), (32, 1280, 7, 7)):
        s = torch.rand(shape, device="cuda")
        ts = [timed(f) for f in (lambda s=s: torch.sigmoid(s),
                                 lambda s=s: torch.sub(one, s),
                                 lambda s=s: torch.rsub(s, 1.0))]
        print(f"{str(shape):22s} " + " ".join(f"{t:9.1f}" for t in ts), flush=True)


if __name__ == "__main__":
    main()
