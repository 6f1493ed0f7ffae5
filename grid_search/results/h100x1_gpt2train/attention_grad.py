"""Where GPT-2 350M's training step spends what the per-op fits miss (one GPU, float16,
batch 32 x sequence 1024, 16 heads of 64): the backend's own ``MatMulGrad`` kernels (a
one-op program compiled by ``distir.backend``), timed as ``DeviceTimer`` times the
calibration kernels (device time, 10 ms trials), with their operands contiguous and as the
step hands them over (the views the ``Transpose`` ops make), and one kernel repeated for
two seconds (sustained clocks).

    python3 grid_search/results/h100x1_gpt2train/attention_grad.py   # from the repo root
"""

from __future__ import annotations

import time

import torch

from calibration.bench import Timer
from calibration.bench_train import DeviceTimer, _compile, _one_op
from distir.ir import DType

B, H, T, HD, D = 32, 16, 1024, 64, 1024
F16 = DType.Float16
dev = torch.device("cuda", 0)
dt = DeviceTimer(Timer(dev, target_s=0.01, trials=3))


def grad_kernel(a: tuple[int, ...], b: tuple[int, ...], dy: tuple[int, ...]):
    fn = _one_op("MatMulGrad", [("a", F16, a), ("b", F16, b), ("dy", F16, dy)], 2)
    return _compile(fn, dev)


def rnd(*shape: int) -> torch.Tensor:
    return torch.randn(shape, device=dev, dtype=torch.float16)


def report(name: str, kernel, args: list[torch.Tensor]) -> float:
    with torch.inference_mode():
        secs, _ = dt.time(lambda: kernel(*args))
    print(f"{name:58s} {secs * 1e3:8.3f} ms", flush=True)
    return secs


# attention scores s = q @ k^T: a = q heads (B, H, T, hd), b = k heads (B, H, hd, T)
k1 = grad_kernel((B, H, T, HD), (B, H, HD, T), (B, H, T, T))
dy = rnd(B, H, T, T)
report("scores MatMulGrad, contiguous a, b", k1, [rnd(B, H, T, HD), rnd(B, H, HD, T), dy])
q, k = rnd(B, T, H, HD), rnd(B, T, H, HD)
report("scores MatMulGrad, a, b Transpose views (as in the step)", k1,
       [q.permute(0, 2, 1, 3), k.permute(0, 2, 3, 1), dy])
del dy
# context c = p @ v: a = p (B, H, T, T), b = v heads (B, H, T, hd), dy (B, H, T, hd)
k2 = grad_kernel((B, H, T, T), (B, H, T, HD), (B, H, T, HD))
p = rnd(B, H, T, T)
report("context MatMulGrad, contiguous b, dy", k2, [p, rnd(B, H, T, HD), rnd(B, H, T, HD)])
report("context MatMulGrad, b, dy Transpose views (as in the step)", k2,
       [p, rnd(B, T, H, HD).permute(0, 2, 1, 3), rnd(B, T, H, HD).permute(0, 2, 1, 3)])
del p
# products alone, as torch.matmul runs them on those operands
a_c, b_c, dy_c = rnd(B, H, T, HD), rnd(B, H, HD, T), rnd(B, H, T, T)
report("  scores da = dy @ b.mT alone (contiguous)", lambda x, y: torch.matmul(x, y.mT),
       [dy_c, b_c])
report("  scores db = a.mT @ dy alone (contiguous)", lambda x, y: torch.matmul(x.mT, y),
       [a_c, dy_c])
report("  copy of one head tensor (B, H, T, hd) from a view", lambda x: x.contiguous(),
       [q.permute(0, 2, 1, 3)])
del a_c, b_c, dy_c
# weight gradients of the fused QKV and the MLP's first layer, as the step runs them
for name, n in (("QKV", 3 * D), ("MLP up", 4 * D)):
    kw = grad_kernel((B, T, D), (D, n), (B, T, n))
    args = [rnd(B, T, D), rnd(D, n), rnd(B, T, n)]
    burst = report(f"{name} weight MatMulGrad (B, T, {D}) x ({D}, {n})", kw, args)
    with torch.inference_mode():
        for _ in range(3):
            kw(*args)
        torch.cuda.synchronize()
        reps, t0 = 0, time.perf_counter()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        while time.perf_counter() - t0 < 2.0:
            for _ in range(20):
                kw(*args)
            reps += 20
        end.record()
        end.synchronize()
    sustained = start.elapsed_time(end) / 1e3 / reps
    print(f"{'  the same, repeated for 2 s (sustained)':58s} {sustained * 1e3:8.3f} ms "
          f"({sustained / burst - 1:+.1%})", flush=True)
    del args, kw
# the tied LM head: x @ wte.t() (the step's layout) against x @ w with w contiguous
V = 50257
x, wte = rnd(B * T, D), rnd(V, D)
report("LM head x @ wte.t() (32768 x 1024 x 50257, the step's)", lambda u, w: u @ w.t(),
       [x, wte])
report("LM head x @ w, w a contiguous (1024, 50257)", lambda u, w: u @ w,
       [x, wte.t().contiguous()])
kh = grad_kernel((B, T, D), (D, V), (B, T, V))
dyh = rnd(B, T, V)
report("LM head MatMulGrad, b = wte.t() view (as in the step)", kh,
       [x.view(B, T, D), wte.t(), dyh])
report("LM head MatMulGrad, b contiguous (1024, 50257)", kh,
       [x.view(B, T, D), wte.t().contiguous(), dyh])
