"""Do kernels run slower in a long step than in a microbenchmark's short burst? Each
kernel is timed as a replayed CUDA graph of 20 calls (device time per call, median of 5
replays, as ``../adam_step/tile_probe.py`` times them) twice: with the GPU idle before
(a burst, as the calibration times them), and after 2 s of replaying that graph without
a pause (the GPU at a step's sustained power), with the SM clock (MHz, ``nvidia-smi``)
read in each state:

    python sustained_probe.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "adam_step"))
from tile_probe import timed  # noqa: E402  (the same replayed timing)


def clock() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        out = "n/a"
    return out.replace(",", "")


def sustained(fn, calls: int = 20, seconds: float = 2.0) -> tuple[float, str]:  # noqa: ANN001
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(20):
            g.replay()
        torch.cuda.synchronize()
    state = clock()
    out = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) * 1e3 / calls)
    return statistics.median(out), state


def main() -> None:
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("kernel                                  burst us  (clock MHz power)   "
          "sustained us  (clock MHz power)  ratio")
    cases = []
    for m, k, n in ((796, 768, 3072), (796, 3072, 768), (3184, 768, 3072)):
        x = torch.randn(m, k, device="cuda")
        w = torch.randn(k, n, device="cuda")
        cases.append((f"float32 {m}x{k} @ {k}x{n}", lambda x=x, w=w: x @ w))
    a = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    cases.append(("bfloat16 8192x4096 @ 4096x4096", lambda a=a, b=b: a @ b))
    y = torch.randn(4, 199, 768, device="cuda")
    cases.append(("float32 column sum [4, 199, 768]", lambda y=y: y.sum((0, 1))))
    z = torch.randn(64 << 20, device="cuda")
    cases.append(("float32 add of 256 MiB", lambda z=z: z + z))
    for name, fn in cases:
        time.sleep(1.0)  # idle
        idle_state = clock()
        burst = timed(fn)
        hot, hot_state = sustained(fn)
        print(f"{name:38s} {burst:9.1f}  ({idle_state:>16s})  {hot:12.1f}  "
              f"({hot_state:>16s})  {hot / burst:5.3f}", flush=True)


if __name__ == "__main__":
    main()
