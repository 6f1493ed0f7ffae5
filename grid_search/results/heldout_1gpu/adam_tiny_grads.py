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
"""

from __future__ import annotations

import json
import statistics

import torch
from torch.profiler import ProfilerActivity, profile


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

            def updates(sets: list = sets, step: torch.Tensor = step) -> None:
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
            prof.export_chrome_trace("/tmp/adam_tiny.json")
            with open("/tmp/adam_tiny.json", encoding="utf-8") as f:
                events = json.load(f)["traceEvents"]
            ks = [e["dur"] for e in events
                  if e.get("cat") == "kernel" and "FusedAdam" in e.get("name", "")]
            print(f"{n:9d}  {scale:10.0e}  {statistics.median(ks):18.1f}", flush=True)
            del graph


if __name__ == "__main__":
    main()
