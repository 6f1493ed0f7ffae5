"""Why an Adam update runs slower in a replayed training step than in the calibration's
microbenchmark (on an H200: 61-68 us in BiT-R50x1's replayed step for 65,536 to 1 M float32
elements, 38-44 us in ``calibration.bench_train``'s replayed sequence): the fused kernel
(``torch._fused_adam_``, one tensor per call, as the backend runs it) timed by
``torch.profiler`` inside replayed CUDA graphs, kernel by kernel, in four settings:

- ``seq``: 64 updates of distinct tensors back to back (the calibration's sequence);
- ``flush``: the same, after a write of four times the L2 cache;
- ``hot``: the same, after 40 ms of float32 matrix products (the card under load, as at
  the end of a step's backward pass);
- ``clones``: as ``seq`` with ``w``, ``m`` and ``v`` copied first (the backend's lowering
  where the program does not donate them, as in the measured steps);
- ``apart``, ``apart+clones``: as ``seq`` and ``clones`` with each update's four operands
  far apart in memory (each role's tensors allocated together, 256 MiB between roles);
- ``zero moments``: as ``clones`` with the values of a step that starts from the same
  state every time, as a measured step does (moments of zero, gradients of about 1e-3;
  the copies keep the inputs unchanged).

Prints, per size and setting, the median kernel time (us) and the SM clock NVML reported
during the replays (``nvidia-smi``).

    python adam_probe.py
"""

from __future__ import annotations

import json
import statistics
import subprocess
import threading

import torch
from torch.profiler import ProfilerActivity, profile


def clocks(stop: threading.Event, out: list[int]) -> None:
    while not stop.is_set():
        try:
            r = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm",
                                "--format=csv,noheader,nounits", "-i", "0"],
                               capture_output=True, text=True, timeout=5)
            out.append(int(r.stdout.split()[0]))
        except Exception:  # noqa: BLE001 - a missing sample is fine
            pass
        stop.wait(0.05)


def main() -> None:
    dev = torch.device("cuda")
    l2 = torch.cuda.get_device_properties(dev).L2_cache_size
    flush = torch.empty(4 * l2, dtype=torch.uint8, device=dev)
    a = torch.randn(8192, 8192, device=dev)
    b = torch.randn(8192, 8192, device=dev)
    step = torch.ones((), device=dev)
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, L2 {l2 >> 20} MiB")
    print("elements  setting   kernel us (median)  SM MHz (median)")
    for n in (2048, 65536, 262144, 1048576):
        sets = [[torch.randn(n, device=dev) for _ in range(4)] for _ in range(64)]
        for s in sets:
            s[3].abs_()
        # the four operands of each update far apart (each role's tensors allocated
        # together, 256 MiB between the roles), as a step's weights, gradients and
        # moments are: allocated at different times, in different pools
        roles = []
        for _ in range(4):
            roles.append([torch.randn(n, device=dev) for _ in range(64)])
            roles.append([torch.empty(256 << 20, dtype=torch.uint8, device=dev)])
        apart = [[roles[2 * r][i] for r in range(4)] for i in range(64)]
        for s in apart:
            s[3].abs_()

        def updates(copy: bool, sets: list = sets) -> None:
            for w, dw, m, v in sets:
                if copy:
                    w, m, v = w.clone(), m.clone(), v.clone()
                torch._fused_adam_([w], [dw], [m], [v], [], [step], lr=1e-4, beta1=0.9,
                                   beta2=0.999, weight_decay=0.0, eps=1e-8, amsgrad=False,
                                   maximize=False)

        # the step's own values: moments of zero (the first step), small gradients
        first = [[torch.randn(n, device=dev), torch.randn(n, device=dev) * 1e-3,
                  torch.zeros(n, device=dev), torch.zeros(n, device=dev)] for _ in range(64)]
        settings = {"seq": lambda: updates(False),
                    "zero moments": lambda f=first: updates(True, f),
                    "flush": lambda: (flush.zero_(), updates(False)),
                    "hot": lambda: ([torch.mm(a, b) for _ in range(2)], updates(False)),
                    "clones": lambda: updates(True),
                    "apart": lambda far=apart: updates(False, far),
                    "apart+clones": lambda far=apart: updates(True, far)}
        for name, fn in settings.items():
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):
                    fn()
            torch.cuda.current_stream().wait_stream(side)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                fn()
            for _ in range(3):
                g.replay()
            torch.cuda.synchronize()
            stop, mhz = threading.Event(), []
            th = threading.Thread(target=clocks, args=(stop, mhz))
            th.start()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(5):
                    g.replay()
                torch.cuda.synchronize()
            stop.set()
            th.join()
            prof.export_chrome_trace("/tmp/adam_probe.json")
            with open("/tmp/adam_probe.json", encoding="utf-8") as f:
                events = json.load(f)["traceEvents"]
            ks = [e["dur"] for e in events
                  if e.get("cat") == "kernel" and "multi_tensor" in e.get("name", "")]
            print(f"{n:9d}  {name:13s}  {statistics.median(ks):18.1f}  "
                  f"{statistics.median(mhz) if mhz else 0:15.0f}")
            del g


if __name__ == "__main__":
    main()
