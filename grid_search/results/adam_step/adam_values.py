"""Whether the fused Adam kernel's time depends on the values it reads (see README.md).

``torch._fused_adam_`` (one tensor per call, as the backend runs it) timed by
``torch.profiler`` inside a replayed CUDA graph of 32 updates of distinct tensors, kernel
by kernel, with the step count and the second moments drawn in several ways:

- ``step 1``, ``step 7``: a training step's count (an integer from 1), moments ``v >= 0``;
- ``step 0.5``: a fractional count;
- ``step -0.73``: a count drawn from a normal distribution, as the runner's random inputs
  give every float input (``distir run`` without ``--inputs``);
- ``v < 0``: step 1 with second moments drawn from a normal distribution (negative half
  the time, so the square root is NaN), as the random inputs give them.

Prints, per size and setting, the median kernel time (us).

    python adam_values.py
"""

from __future__ import annotations

import json
import statistics

import torch
from torch.profiler import ProfilerActivity, profile


def replayed_kernel_us(sets: list, step: torch.Tensor) -> float:
    """The median time (us) of ``torch._fused_adam_``'s kernel over updates of ``sets``
    (``(w, g, m, v)`` each, one call a tensor, as the backend runs it) captured in a CUDA
    graph and replayed three times under ``torch.profiler``."""

    def updates() -> None:
        for w, g, m, v in sets:
            torch._fused_adam_([w.clone()], [g], [m.clone()], [v.clone()], [], [step],
                               lr=0.01, beta1=0.9, beta2=0.999, weight_decay=0.0,
                               eps=1e-8, amsgrad=False, maximize=False)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            updates()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        updates()
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            graph.replay()
        torch.cuda.synchronize()
    prof.export_chrome_trace("/tmp/adam_values.json")
    with open("/tmp/adam_values.json", encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    ks = [e["dur"] for e in events
          if e.get("cat") == "kernel" and "FusedAdam" in e.get("name", "")]
    return statistics.median(ks)


def main() -> None:
    dev = torch.device("cuda")
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("elements  setting       kernel us (median)")
    settings = (("step 1", 1.0, True), ("step 7", 7.0, True), ("step 0.5", 0.5, True),
                ("step -0.73", -0.73, True), ("v < 0", 1.0, False),
                ("both random", -0.73, False))
    for n in (2048, 16384, 65536, 262144, 1048576):
        for name, count, v_pos in settings:
            step = torch.full((), count, device=dev)
            sets = []
            for _ in range(32):
                w, g, m, v = (torch.randn(n, device=dev) for _ in range(4))
                if v_pos:
                    v.abs_()
                sets.append((w, g, m, v))

            us = replayed_kernel_us(sets, step)
            print(f"{n:9d}  {name:12s}  {us:18.1f}", flush=True)


if __name__ == "__main__":
    main()
