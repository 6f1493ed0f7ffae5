"""Training steps made by ``distir.transforms.training_step``, run on one GPU and beside the
simulator's prediction: GPT-2 (beside the same model in eager PyTorch) and ResNet-50.

- ``--model gpt2``: ``training_step(gpt2, loss="cross_entropy", optimizer="adam")`` (with
  ``checkpoint="layers"`` too unless ``--no-checkpoint``), run by ``distir.run`` (NCCL, one
  process); with ``--eager``, ``distir.models.torch_gpt2.GPT2`` with
  ``F.cross_entropy(reduction="sum")``, ``loss.backward()`` and ``torch.optim.Adam``
  (PyTorch's default, foreach) on the same sizes, float32.
- ``--model resnet50``: torchvision's ResNet-50 layout (v1.5: the stride in the 3 x 3
  convolution; ``resnet50_forward``) built in DistIR with inference-mode
  ``BatchNormalization``, made into ``training_step(..., loss="cross_entropy",
  optimizer="adam", batchnorm="train")``: the batch's statistics, as ``model.train()``.

Each batch size of ``--batch`` is one step program, measured (median step time of
``--steps`` after ``--warmup``, peak memory) and simulated on ``--hardware``. Printed: one
line per step; ``--json FILE`` writes the rows; ``--profile DIR`` adds one profiled step of
the first batch size (``distir run --profile``: every op in a ``distir#I OPTYPE`` range,
``DIR/rank0.json``), for per-op comparisons with the simulator (``distir explain``).

    python benchmarks/bench_grad.py                       # GPT-2 350M: 24 layers, d 1024, b 8
    python benchmarks/bench_grad.py --model gpt2 --batch 4 8 --eager --no-checkpoint
    python benchmarks/bench_grad.py --model resnet50 --batch 32 64 128
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any


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


def resnet50_forward(batch: int, image: int = 224, classes: int = 1000,
                     blocks: tuple[int, ...] = (3, 4, 6, 3)) -> Any:
    """ResNet-50 (torchvision's layout, v1.5) as a DistIR function of ``x`` ``[batch, 3,
    image, image]`` (float32) and its weights, all parameters (no initializers): convolutions
    without bias, each followed by an inference-mode ``BatchNormalization`` (scale, bias,
    running mean and variance), ``Relu``; a 7 x 7 stride-2 stem and a 3 x 3 stride-2 max
    pool; bottleneck blocks (1 x 1, 3 x 3 with the stage's stride, 1 x 1 to 4 x the width;
    a 1 x 1 strided projection on each stage's first block); global average pool and a
    ``Gemm`` classifier. Returns ``(function, names of the trained weights)``."""
    from distir.ir import DType, FunctionBuilder, TensorType

    f32 = DType.Float32
    b = FunctionBuilder("resnet50")
    x = b.param("x", TensorType(f32, (batch, 3, image, image), 0))
    trained: list[str] = []

    def param(name: str, shape: tuple[int, ...], train: bool = True) -> Any:
        if train:
            trained.append(name)
        return b.param(name, TensorType(f32, shape, 0))

    def conv_bn(v: Any, name: str, cin: int, cout: int, k: int, stride: int,
                relu: bool) -> Any:
        w = param(f"{name}.weight", (cout, cin, k, k))
        p = k // 2
        y = b.op("Conv", v, w, kernel_shape=[k, k], strides=[stride, stride],
                 pads=[p, p, p, p])
        bn = [param(f"{name}.bn.weight", (cout,)), param(f"{name}.bn.bias", (cout,)),
              param(f"{name}.bn.running_mean", (cout,), False),
              param(f"{name}.bn.running_var", (cout,), False)]
        y = b.op("BatchNormalization", y, *bn, epsilon=1e-5, momentum=0.9)
        return b.op("Relu", y) if relu else y

    y = conv_bn(x, "conv1", 3, 64, 7, 2, True)
    y = b.op("MaxPool", y, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, (n, width) in enumerate(zip(blocks, (64, 128, 256, 512))):
        for i in range(n):
            stride = 2 if i == 0 and stage > 0 else 1
            name = f"layer{stage + 1}.{i}"
            h = conv_bn(y, f"{name}.conv1", cin, width, 1, 1, True)
            h = conv_bn(h, f"{name}.conv2", width, width, 3, stride, True)
            h = conv_bn(h, f"{name}.conv3", width, 4 * width, 1, 1, False)
            short = (conv_bn(y, f"{name}.downsample", cin, 4 * width, 1, stride, False)
                     if i == 0 else y)
            y = b.op("Relu", b.op("Add", h, short))
            cin = 4 * width
    y = b.op("Flatten", b.op("GlobalAveragePool", y))
    w = param("fc.weight", (classes, cin))
    bias = param("fc.bias", (classes,))
    return b.ret(b.op("Gemm", y, w, bias, transB=1)), trained


def measure(step: Any, hardware: str, steps: int, warmup: int,
            profile: str | None = None) -> dict[str, float]:
    """Run (``distir.run``, NCCL, one process) and simulate a step."""
    import distir

    sim = distir.simulate(step, hardware=hardware)
    t = time.perf_counter()
    res = distir.run(step, backend="nccl", steps=steps, warmup=warmup, profile=profile)
    assert res is not None
    return {"measured_s": res.step_latency_s, "peak_bytes": float(max(res.peak_memory_bytes)),
            "simulated_s": sim.latency_s,
            "simulated_peak_bytes": float(max(sim.peak_memory_bytes.values())),
            "wall_s": time.perf_counter() - t}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=("gpt2", "resnet50"), default="gpt2")
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--d-model", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--batch", type=int, nargs="+", default=None,
                    help="batch sizes (default: 8 for GPT-2, 64 for ResNet-50)")
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--image", type=int, default=224)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--hardware", default="h100-sxm")
    ap.add_argument("--eager", action="store_true", help="GPT-2: the eager step too")
    ap.add_argument("--no-checkpoint", action="store_true",
                    help="GPT-2: skip the checkpoint=\"layers\" variant")
    ap.add_argument("--profile", default=None, help="directory of a profiled step's trace")
    ap.add_argument("--json", default=None, help="write the rows to this file")
    a = ap.parse_args()

    import torch

    from distir.transforms import training_step

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    batches = a.batch or ([8] if a.model == "gpt2" else [64])
    rows: list[dict[str, Any]] = []
    print(f"{device}, torch {torch.__version__}; {a.model}, float32, Adam; batches {batches}")
    print(f"{'variant':34s} {'measured ms':>12s} {'peak GiB':>9s} {'sim ms':>8s} "
          f"{'sim GiB':>8s} {'sim/meas':>8s}")
    for i, batch in enumerate(batches):
        prof = a.profile if i == 0 else None
        variants: list[tuple[str, Any]] = []
        if a.model == "gpt2":
            from distir.models.gpt2 import GPT2Config

            cfg = GPT2Config(n_layer=a.layers, d_model=a.d_model, n_head=a.heads,
                             vocab_size=a.vocab, seq_len=a.seq, batch_size=batch)
            if a.eager:
                eager_s, eager_mem = eager_step_s(a.layers, a.d_model, a.heads, batch, a.seq,
                                                  a.vocab, a.steps, a.warmup)
                torch.cuda.empty_cache()  # the eager model is gone; its cache too
                rows.append({"model": "gpt2", "variant": "eager", "batch": batch,
                             "measured_s": eager_s, "peak_bytes": eager_mem})
                print(f"{f'eager autograd + Adam b{batch}':34s} {eager_s * 1e3:12.1f} "
                      f"{eager_mem / 2**30:9.1f}")
            for ck in ("none",) + (() if a.no_checkpoint else ("layers",)):
                variants.append((f"checkpoint={ck}", training_step(
                    cfg.build(), loss="cross_entropy", optimizer="adam", lr=1e-4,
                    wrt=list(cfg.weight_shapes()), checkpoint=ck)))
        else:
            fwd, wrt = resnet50_forward(batch, a.image)
            variants.append(("batchnorm=train", training_step(
                fwd, loss="cross_entropy", optimizer="adam", lr=1e-4, wrt=wrt,
                batchnorm="train")))
        for name, step in variants:
            r = measure(step, a.hardware, a.steps, a.warmup, prof)
            prof = None
            rows.append({"model": a.model, "variant": name, "batch": batch, **r})
            print(f"{f'distir {name} b{batch}':34s} {r['measured_s'] * 1e3:12.1f} "
                  f"{r['peak_bytes'] / 2**30:9.1f} {r['simulated_s'] * 1e3:8.1f} "
                  f"{r['simulated_peak_bytes'] / 2**30:8.1f} "
                  f"{r['simulated_s'] / r['measured_s']:8.3f}", flush=True)
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump({"device": device, "torch": torch.__version__, "args": vars(a),
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
