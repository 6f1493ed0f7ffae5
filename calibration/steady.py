"""What a kernel's calibrated time leaves out, on one GPU: a diagnostic for issue 17's
uniform under-prediction of steps replayed as CUDA graphs with a ``--device-time`` profile.

For the kernels of a GPT-2-shaped layer (d 1536, 12 heads, sequence 1024, bfloat16) at a few
token counts, three device times per call:

- ``warm``: as ``calibrate --device-time`` measures (``DeviceTimer``: the same inputs call
  after call, so inputs smaller than the L2 cache stay in it);
- ``cold``: the inputs rotated among copies that together exceed the L2 cache many times,
  so that every call reads its inputs from memory, as a step does with weights and with
  activations made long before;
- ``sustained``: ``warm`` again, after the GPU has run the kernel back to back for
  ``--load`` seconds (clocks settled under load, as in a long step), with the SM clock read
  (NVML) before the load and at its end.

    python -m calibration.steady -o steady.csv [--load 3]
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = ["main"]

L2_ROTATION_BYTES = 512 << 20
"""The inputs of the cold timing span at least this much (an H100's or H200's L2 holds
50-60 MiB)."""


def _clock(dev: int) -> int | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(dev)
        return int(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM))
    except Exception:  # noqa: BLE001 - the clock is an aside
        return None


def _cases(torch: Any, dt: Any, dev: Any, token_counts: list[int],
           ) -> list[tuple[str, Callable[[], tuple]]]:
    """``(name, make)``: ``make()`` returns ``(fn, args)`` with fresh inputs; ``fn(*args)``
    runs the kernel once."""
    d, h, s = 1536, 12, 1024
    out: list[tuple[str, Callable[[], tuple]]] = []
    for tokens in token_counts:
        for n_in, n_out in ((d, 3 * d), (d, 4 * d), (4 * d, d)):
            def make(t=tokens, a=n_in, b=n_out):  # type: ignore[no-untyped-def]
                x = torch.randn(t, a, device=dev, dtype=dt)
                w = torch.randn(a, b, device=dev, dtype=dt)
                return (lambda x, w: torch.matmul(x, w)), (x, w)
            out.append((f"matmul {tokens}x{n_in}x{n_out}", make))

        def ln(t=tokens):  # type: ignore[no-untyped-def]
            x = torch.randn(t, d, device=dev, dtype=dt)
            g = torch.ones(d, device=dev, dtype=dt)
            return (lambda x, g: torch.nn.functional.layer_norm(x, (d,), g, g)), (x, g)
        out.append((f"layernorm {tokens}x{d}", ln))

        def gelu(t=tokens):  # type: ignore[no-untyped-def]
            x = torch.randn(t, 4 * d, device=dev, dtype=dt)
            return (lambda x: torch.nn.functional.gelu(x, approximate="tanh")), (x,)
        out.append((f"gelu {tokens}x{4 * d}", gelu))

        def add(t=tokens):  # type: ignore[no-untyped-def]
            x = torch.randn(t, d, device=dev, dtype=dt)
            y = torch.randn(t, d, device=dev, dtype=dt)
            return (lambda x, y: x + y), (x, y)
        out.append((f"add {tokens}x{d}", add))
        b = max(tokens // s, 1)

        def softmax(b=b):  # type: ignore[no-untyped-def]
            x = torch.randn(b * h, s, s, device=dev, dtype=dt)
            return (lambda x: torch.softmax(x, -1)), (x,)
        out.append((f"softmax {b * h}x{s}x{s}", softmax))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m calibration.steady", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-o", "--out", required=True)
    p.add_argument("--load", type=float, default=3.0, help="seconds of load before the "
                   "sustained timing (default 3)")
    p.add_argument("--tokens", type=int, nargs="+", default=[1024, 2048, 8192, 32768],
                   help="token counts (batch x sequence) of the kernels")
    p.add_argument("--cpu", action="store_true", help="run on the CPU (to test the script)")
    a = p.parse_args(argv)
    import torch

    from calibration.bench import Timer
    from calibration.bench_train import DeviceTimer

    if not torch.cuda.is_available() and not a.cpu:
        print("error: calibration.steady needs a CUDA GPU (or --cpu)", file=sys.stderr)
        return 2
    dev = torch.device("cpu") if a.cpu else torch.device("cuda", 0)
    timer = DeviceTimer(Timer(dev, target_s=0.02, trials=3))
    fields = ["case", "bytes_in", "warm_us", "cold_us", "sustained_us", "copies",
              "clock_idle_mhz", "clock_loaded_mhz"]
    with open(a.out, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for name, make in _cases(torch, torch.bfloat16, dev, a.tokens):
            fn, args = make()
            nbytes = sum(x.numel() * x.element_size() for x in args)
            warm, _ = timer.time(lambda fn=fn, args=args: fn(*args))
            copies = max(2, min(64, -(-L2_ROTATION_BYTES // max(nbytes, 1))))
            sets = [args] + [make()[1] for _ in range(copies - 1)]
            it = [0]

            def rotating(fn=fn, sets=sets, it=it):  # type: ignore[no-untyped-def]
                i = it[0] = (it[0] + 1) % len(sets)
                return fn(*sets[i])
            cold, _ = timer.time(rotating)
            del sets
            idle = _clock(0)
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < a.load:
                for _ in range(50):
                    fn(*args)
                timer.timer.sync()
            loaded = _clock(0)
            sustained, _ = timer.time(lambda fn=fn, args=args: fn(*args))
            row = {"case": name, "bytes_in": nbytes, "warm_us": round(warm * 1e6, 3),
                   "cold_us": round(cold * 1e6, 3), "sustained_us": round(sustained * 1e6, 3),
                   "copies": copies, "clock_idle_mhz": idle, "clock_loaded_mhz": loaded}
            w.writerow(row)
            f.flush()
            print(f"{name:28s} in {nbytes / 2**20:8.1f} MiB: warm {warm * 1e6:9.2f} us, cold "
                  f"{cold * 1e6:9.2f} us ({cold / warm:5.3f}x), sustained "
                  f"{sustained * 1e6:9.2f} us ({sustained / warm:5.3f}x); SM clock "
                  f"{idle} -> {loaded} MHz", flush=True)
            if dev.type == "cuda":
                torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
