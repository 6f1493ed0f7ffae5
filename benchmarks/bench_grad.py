"""A GPT-2 training step made by ``distir.transforms.training_step`` beside the same step in
eager PyTorch, on one GPU.

The DistIR step is ``training_step(gpt2, loss="cross_entropy", optimizer="adam")``, with
and without ``checkpoint="layers"``, run by ``distir.run`` (NCCL, one process) and
simulated on ``--hardware``; the eager step is ``distir.models.torch_gpt2.GPT2`` with
``F.cross_entropy(reduction="sum")``, ``loss.backward()`` and ``torch.optim.Adam``
(PyTorch's default, foreach) on the same sizes, float32. Printed: step time (ms) and peak
memory (GiB), measured and simulated, and eager / DistIR throughput.

    python benchmarks/bench_grad.py                       # GPT-2 350M: 24 layers, d 1024
    python benchmarks/bench_grad.py --layers 12 --d-model 768 --heads 12 --batch 8
"""

from __future__ import annotations

import argparse
import statistics
import time


def eager_step_s(layers: int, d: int, heads: int, batch: int, seq: int, vocab: int,
                 steps: int, warmup: int) -> tuple[float, float]:
    """Median step time (s) and peak memory (bytes) of the eager step."""
    import torch

    from distir.models.gpt2 import GPT2Config
    from distir.models.torch_gpt2 import GPT2

    cfg = GPT2Config(n_layer=layers, d_model=d, n_head=heads, vocab_size=vocab,
                     seq_len=seq, batch_size=batch)
    model = GPT2(cfg, seed=0).cuda().train(False)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    ids = torch.randint(0, vocab, (batch, seq), device="cuda")
    lab = torch.randint(0, vocab, (batch, seq), device="cuda")

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        logits = model(ids)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), lab.reshape(-1),
                                                 reduction="sum")
        loss.backward()
        opt.step()

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times), float(torch.cuda.max_memory_allocated())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--d-model", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--hardware", default="h100-sxm")
    a = ap.parse_args()

    import torch

    import distir
    from distir.models.gpt2 import GPT2Config
    from distir.transforms import training_step

    cfg = GPT2Config(n_layer=a.layers, d_model=a.d_model, n_head=a.heads,
                     vocab_size=a.vocab, seq_len=a.seq, batch_size=a.batch)
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}; GPT-2 {a.layers} "
          f"layers, d {a.d_model}, batch {a.batch} x {a.seq}, float32, Adam")
    eager_s, eager_mem = eager_step_s(a.layers, a.d_model, a.heads, a.batch, a.seq, a.vocab,
                                      a.steps, a.warmup)
    print(f"{'variant':28s} {'measured ms':>12s} {'peak GiB':>9s} {'sim ms':>8s} "
          f"{'sim GiB':>8s} {'eager/this':>10s}")
    print(f"{'eager autograd + Adam':28s} {eager_s * 1e3:12.1f} {eager_mem / 2**30:9.1f}")
    for ck in ("none", "layers"):
        step = training_step(cfg.build(), loss="cross_entropy", optimizer="adam", lr=1e-4,
                             wrt=list(cfg.weight_shapes()), checkpoint=ck)
        sim = distir.simulate(step, hardware=a.hardware)
        res = distir.run(step, backend="nccl", steps=a.steps, warmup=a.warmup)
        assert res is not None
        print(f"{'distir checkpoint=' + ck:28s} {res.step_latency_s * 1e3:12.1f} "
              f"{max(res.peak_memory_bytes) / 2**30:9.1f} {sim.latency_s * 1e3:8.1f} "
              f"{max(sim.peak_memory_bytes.values()) / 2**30:8.1f} "
              f"{eager_s / res.step_latency_s:10.2f}")


if __name__ == "__main__":
    main()
